"""Streaming sources: every input kind becomes an iterator of raw rows, and of ``{id, text, meta}``.

``iter_items`` is the one reader of files and folders; it yields ``(where, default id, raw
row)``, where ``where`` names the file and row for an error (``train.jsonl:3``,
``train.parquet: row 12``). ``iter_records`` shapes the items as ``{id, text, meta}`` for
curation, ``trainteam.curation.rows`` as a task's canonical training rows. It reads:

- JSON Lines (``.jsonl``) and text (``.txt``) line by line, CSV/TSV row by row (numbered by
  the line a row starts on), Parquet in record batches;
- JSON (``.json``): a list of objects, an object holding one (under ``data``, ``rows``,
  ``records``, ``examples`` or ``instances``, or under split names: ``{"train": [...],
  "test": [...]}``), or JSON Lines (what ``datasets``' ``to_json`` writes);
- a ``datasets`` ``save_to_disk`` folder: a Dataset, or a DatasetDict (one split of it);
- a folder of data files, read in name order (subfolders too). Files whose names carry a
  split (``train.jsonl``, ``test-00000-of-00001.parquet``, ``data/validation.csv``,
  ``dev.json``) make a dataset with splits;
- a list of records or a ``datasets`` Dataset / IterableDataset in memory.

A split is asked for by name (``validation``, ``valid``, ``val``, ``dev`` and ``eval`` are
one split, as are ``train``/``training`` and ``test``/``testing``); without one, a source
with splits gives ``train`` (or its only split). Nothing is loaded whole but a JSON file. A
malformed line stops with ``file:line: reason``, or is skipped and counted when asked.

Nothing empty or unbounded gets past it: a source that gives no row (an empty file, blank lines,
a folder of empty files, only malformed lines skipped) stops once read to its end, and a row over
``max_row_bytes`` (``MAX_ROW_BYTES``, 1 MiB, unless a task's ``data.max_row_bytes`` says otherwise)
stops naming its file and row — a line is read no further than the bound. A path that is not a
file or a folder (a device, a FIFO) is refused before it is read or hashed (``check_source``).
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from trainteam.core.errors import BadInput
from trainteam.curation.jsonl import SkipCounter, bounded_lines, iter_jsonl, too_long

__all__ = [
    "DATA_SUFFIXES",
    "MAX_ROW_BYTES",
    "SkipCounter",
    "check_source",
    "source_where",
    "canonical_split",
    "iter_items",
    "iter_records",
    "pick_split",
    "source_name",
    "split_names",
]

Item = tuple[str, str, Any]  # (where, default id, raw row)
DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".tsv", ".parquet", ".txt")
SPLITS = {
    "train": "train",
    "training": "train",
    "test": "test",
    "testing": "test",
    "validation": "validation",
    "valid": "validation",
    "val": "validation",
    "dev": "validation",
    "eval": "validation",
}
MAX_ROW_BYTES = 1 << 20  # one row: 64 sequences of 4,096 tokens at 4 bytes a token; a task may raise it
JSON_CONTAINERS = ("data", "rows", "records", "examples", "instances")
_SAVED_META = ("dataset_info.json", "dataset_infos.json", "state.json", "dataset_dict.json")


def source_name(source: Any) -> str:
    if isinstance(source, (str, Path)):
        return str(source)
    return type(source).__name__


def canonical_split(name: str) -> str:
    """One name per split: ``dev``/``val``/``valid``/``eval`` are ``validation``; others as given."""
    return SPLITS.get(name.lower(), name)


# -- {id, text, meta} for curation ---------------------------------------------------------------


def _to_record(raw: Any, where: str, default_id: str, text_field: str) -> dict:
    """Shape one raw item as ``{id, text, meta}``; raise BadInput naming ``where``."""
    if isinstance(raw, str):
        return {"id": default_id, "text": raw, "meta": {}}
    if not isinstance(raw, dict):
        raise BadInput(f"{where}: expected an object with a {text_field!r} field, got {type(raw).__name__}")
    text = raw.get(text_field)
    if not isinstance(text, str):
        reason = "missing" if text is None else f"not a string ({type(text).__name__})"
        raise BadInput(f"{where}: field {text_field!r} is {reason}")
    meta = (
        raw.get("meta")
        if isinstance(raw.get("meta"), dict)
        else {k: v for k, v in raw.items() if k not in (text_field, "id", "meta")}
    )
    rid = raw.get("id")
    return {"id": str(rid) if rid is not None else default_id, "text": text, "meta": meta}


def _shape(items: Iterable[Item], text_field: str, skip_bad: bool, skipped: SkipCounter | None) -> Iterator[dict]:
    for where, default_id, raw in items:
        try:
            yield _to_record(raw, where, default_id, text_field)
        except BadInput as exc:
            if not skip_bad:
                raise
            if skipped is not None:
                skipped.add(str(exc))


def iter_records(
    source: Any,
    *,
    text_field: str = "text",
    skip_bad: bool = False,
    skipped: SkipCounter | None = None,
    txt_mode: Literal["paragraph", "line", "file"] = "paragraph",
    streaming: bool = False,
    batch_size: int = 1024,
    split: str | None = None,
) -> Iterator[dict]:
    """Stream ``{id, text, meta}`` from any source ``iter_items`` reads, or a list of records
    or a ``datasets`` Dataset / IterableDataset. ``streaming=True`` reads files through
    ``datasets``' streaming mode. Records without an ``id`` get ``<source>:<position>``."""
    if isinstance(source, (str, Path)) and streaming:
        path = Path(source)
        if not path.exists():
            raise BadInput(f"{path}: no such file or folder")
        items: Iterable[Item] = _streamed_files(path)
    else:
        items = iter_items(
            source, skip_bad=skip_bad, skipped=skipped, txt_mode=txt_mode, batch_size=batch_size, split=split
        )
    yield from _shape(items, text_field, skip_bad, skipped)


# -- raw rows from any source ------------------------------------------------------------------


def iter_items(
    source: Any,
    *,
    split: str | None = None,
    skip_bad: bool = False,
    skipped: SkipCounter | None = None,
    txt_mode: Literal["paragraph", "line", "file"] = "paragraph",
    batch_size: int = 1024,
    max_row_bytes: int | None = MAX_ROW_BYTES,
) -> Iterator[Item]:
    """``(where, default id, raw row)`` of every row of a file, a folder or an in-memory
    source, in order (``split``: which split of a source that has several). A row over
    ``max_row_bytes`` (a line, or a row's JSON) stops naming the file and row; a source that
    gives no row at all stops too, once read to its end (an empty file is no dataset)."""
    skipped = skipped if skipped is not None or not skip_bad else SkipCounter()
    n = 0
    for item in _items(source, split, _Reading(skip_bad, skipped, txt_mode, batch_size, max_row_bytes)):
        n += 1
        yield item
    if n == 0:
        raise BadInput(_no_rows(source, split, skipped))


def check_source(source: Any) -> None:
    """A path names a folder or a regular file: before anything reads or hashes it (``/dev/zero``
    would never end, a FIFO would block). Other sources pass."""
    if not isinstance(source, (str, Path)):
        return
    path = Path(source)
    if not path.exists():
        raise BadInput(f"{path}: no such file or folder")
    if not path.is_dir() and not path.is_file():
        raise BadInput(f"{path}: not a regular file or a folder (a device, FIFO or socket)")


def source_where(source: Any) -> str:
    """A source as an error names it: its path, or ``source`` for rows in memory."""
    return str(source) if isinstance(source, (str, Path)) else "source"


def _no_rows(source: Any, split: str | None, skipped: SkipCounter | None) -> str:
    where = source_where(source) + (f" (split {split})" if split else "")
    if skipped is not None and skipped.count:
        first = f"; the first: {skipped.examples[0]}" if skipped.examples else ""
        return f"{where}: no usable row ({skipped.count} malformed skipped{first})"
    if isinstance(source, (str, Path)) and Path(source).is_dir():
        return f"{where}: no rows in its files (they are empty, or only blank lines)"
    if isinstance(source, (str, Path)):
        return f"{where}: no rows (the file is empty, or only blank lines)"
    return f"{where}: no rows"


def _row_bytes_ok(where: str, raw: Any, max_row_bytes: int | None) -> Any:
    """``raw`` when its JSON is within the bound (rows not read as lines: JSON, Parquet, datasets, memory)."""
    if max_row_bytes is not None:
        size = len(raw.encode()) if isinstance(raw, str) else len(json.dumps(raw, ensure_ascii=False, default=str))
        if size > max_row_bytes:
            raise BadInput(f"{where}: {too_long(max_row_bytes)}")
    return raw


@dataclass(frozen=True)
class _Reading:
    """How ``iter_items`` reads every file of a source: malformed lines skipped (and counted) or not, text
    files' rows, Parquet and ``datasets`` batches, and the bound on one row."""

    skip_bad: bool
    skipped: SkipCounter | None
    txt_mode: str
    batch_size: int
    cap: int | None


def _items(source: Any, split: str | None, how: _Reading) -> Iterator[Item]:
    if not isinstance(source, (str, Path)):
        if isinstance(source, dict) or not hasattr(source, "__iter__"):
            raise BadInput(f"source: expected a path, a list of records or a dataset, got {type(source).__name__}")
        yield from _memory_items(source, "source", how.cap)
        return
    check_source(source)
    path = Path(source)
    if path.is_dir():
        if _is_saved_dataset(path):
            yield from _saved_items(path, split, how.batch_size, how.cap)
            return
        for f in _split_files(path, split):
            yield from _file_items(f, None, how)
        return
    yield from _file_items(path, split, how)


def _file_items(path: Path, split: str | None, how: _Reading) -> Iterator[Item]:
    suffix = path.suffix.lower()
    if suffix == ".json":
        yield from _json_items(path, split, how.skip_bad, how.skipped, how.cap)
        return
    if split is not None and canonical_split(split) != "train":
        raise BadInput(f"{path}: one file is one split; it has no split {split!r}")
    if suffix == ".jsonl":
        yield from _good_lines(path, how.skip_bad, how.skipped, how.cap)
    elif suffix in (".csv", ".tsv"):
        yield from _csv_items(path, "\t" if suffix == ".tsv" else ",", how.cap)
    elif suffix == ".txt":
        yield from _txt_items(path, how.txt_mode, how.cap)
    elif suffix == ".parquet":
        yield from _parquet_items(path, how.batch_size, how.cap)
    else:
        raise BadInput(f"{path}: unknown source type {suffix!r} (use {', '.join(DATA_SUFFIXES)} or a folder)")


def _good_lines(path: Path, skip_bad: bool, skipped: SkipCounter | None, cap: int | None) -> Iterator[Item]:
    lineno_of = _LineTracker()
    for obj in iter_jsonl(path, skip_bad=skip_bad, skipped=skipped, on_line=lineno_of, max_line_bytes=cap):
        yield f"{path}:{lineno_of.n}", f"{path.stem}:{lineno_of.n}", obj


class _LineTracker:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, n: int) -> None:
        self.n = n


def _decoded_lines(path: Path, cap: int | None) -> Iterator[str]:
    """A file's lines as text, an encoding error naming its line (a BOM some editors write dropped)."""
    with path.open("rb") as fh:
        for lineno, raw in bounded_lines(fh, path, cap):
            try:
                yield raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raise BadInput(f"{path}:{lineno}: not UTF-8 ({exc.reason})") from None


def _csv_items(path: Path, delimiter: str, cap: int | None) -> Iterator[Item]:
    """Rows of a CSV/TSV file with a header line, as ``{column: string}``, each named by the line it starts on."""
    reader = csv.reader(_decoded_lines(path, cap), delimiter=delimiter)
    try:
        header = next(reader, None)
        if header is None:
            return
        if len(set(header)) != len(header) or "" in header:
            raise BadInput(f"{path}:1: the header needs distinct, non-empty column names ({header[:8]})")
        while True:
            start = reader.line_num + 1
            row = next(reader, None)
            if row is None:
                return
            if not row:
                continue  # a blank line
            if len(row) != len(header):
                raise BadInput(f"{path}:{start}: {len(row)} fields, the header has {len(header)}")
            yield (
                f"{path}:{start}",
                f"{path.stem}:{start}",
                _row_bytes_ok(f"{path}:{start}", dict(zip(header, row, strict=True)), cap),
            )
    except csv.Error as exc:
        raise BadInput(f"{path}:{reader.line_num}: not valid CSV ({exc})") from None


def _txt_items(path: Path, mode: str, cap: int | None) -> Iterator[Item]:
    """A text file as one row, a row per non-blank line, or a row per paragraph (lines up to a blank one)."""
    if mode == "file":
        text = "".join(_decoded_lines(path, cap))
        yield f"{path}:1", path.stem, _row_bytes_ok(f"{path}:1", text, cap)
        return
    buf: list[str] = []
    start = 0
    for lineno, line in enumerate(_decoded_lines(path, cap), 1):
        if mode == "line":
            if line.strip():
                yield f"{path}:{lineno}", f"{path.stem}:{lineno}", line.rstrip("\n").rstrip("\r")
            continue
        if line.strip():
            if not buf:
                start = lineno
            buf.append(line.rstrip("\n").rstrip("\r"))
        elif buf:
            yield f"{path}:{start}", f"{path.stem}:{start}", _row_bytes_ok(f"{path}:{start}", "\n".join(buf), cap)
            buf = []
    if buf:
        yield f"{path}:{start}", f"{path.stem}:{start}", _row_bytes_ok(f"{path}:{start}", "\n".join(buf), cap)


def _parquet_items(path: Path, batch_size: int, cap: int | None) -> Iterator[Item]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise BadInput(f"{path}: not a readable Parquet file ({exc})") from None
    row = 0
    for batch in pf.iter_batches(batch_size=batch_size):
        for raw in batch.to_pylist():
            yield f"{path}: row {row}", f"{path.stem}:{row}", _row_bytes_ok(f"{path}: row {row}", raw, cap)
            row += 1


# -- JSON ----------------------------------------------------------------------------------------


def _load_json(path: Path) -> Any:
    """The JSON value of a file, or None when it is JSON Lines (several values, one a line)."""
    raw = path.read_bytes().removeprefix(b"\xef\xbb\xbf")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise BadInput(f"{path}:{line}: not UTF-8 ({exc.reason})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        if exc.msg == "Extra data":
            return None
        raise BadInput(f"{path}:{exc.lineno}: invalid JSON ({exc.msg} at column {exc.colno})") from None


def _json_splits(data: Any) -> dict[str, str]:
    """Canonical split name -> key of a JSON object that holds its rows by split."""
    if not isinstance(data, dict):
        return {}
    return {
        canonical_split(k): k for k, v in data.items() if canonical_split(k) in SPLITS.values() and isinstance(v, list)
    }


def _json_items(
    path: Path, split: str | None, skip_bad: bool, skipped: SkipCounter | None, cap: int | None
) -> Iterator[Item]:
    data = _load_json(path)
    if data is None:
        if split is not None and canonical_split(split) != "train":
            raise BadInput(f"{path}: JSON Lines is one split; it has no split {split!r}")
        yield from _good_lines(path, skip_bad, skipped, cap)
        return
    key, rows = _json_rows(data, path, split)
    label = f"{path}: {key}:" if key else f"{path}:"
    for i, raw in enumerate(rows):
        yield f"{label} row {i}", f"{path.stem}:{i}", _row_bytes_ok(f"{label} row {i}", raw, cap)


def _json_rows(data: Any, path: Path, split: str | None) -> tuple[str | None, list]:
    splits = _json_splits(data)
    if splits:
        key = splits[pick_split(split, list(splits), path)]
        return key, data[key]
    if split is not None and canonical_split(split) != "train":
        raise BadInput(f"{path}: no split {split!r} (the file holds one list of rows)")
    if isinstance(data, list):
        return None, data
    if isinstance(data, dict):
        container = next((k for k in JSON_CONTAINERS if isinstance(data.get(k), list)), None)
        if container is not None:
            return container, data[container]
        return None, [data]  # one object: one row (JSON Lines of one line)
    raise BadInput(f"{path}: expected a list of objects or an object of rows, got {type(data).__name__}")


# -- splits ------------------------------------------------------------------------------------


def pick_split(split: str | None, available: list[str], where: str | Path) -> str:
    """The split asked for (by its name, or its canonical name), else ``train``, else the only one."""
    if split is None:
        if "train" in available or len(available) == 1:
            return "train" if "train" in available else available[0]
        raise BadInput(f"{where}: has splits {', '.join(available)} and none is 'train'; name the split to read")
    if split in available:
        return split
    match = [a for a in available if canonical_split(a) == canonical_split(split)]
    if match:
        return match[0]
    raise BadInput(f"{where}: no split {split!r} (splits: {', '.join(available)})")


def split_names(source: str | Path) -> list[str]:
    """The splits a source holds (a DatasetDict's, a folder's split-named files', a JSON object's
    split keys); ``[]`` when it is one split."""
    path = Path(source)
    if path.is_dir():
        if (path / "dataset_dict.json").is_file():
            try:
                return list(json.loads((path / "dataset_dict.json").read_text())["splits"])
            except (ValueError, KeyError, TypeError):
                raise BadInput(f"{path}/dataset_dict.json: not a datasets DatasetDict index") from None
        if _is_saved_dataset(path):
            return []
        return list(dict.fromkeys(s for s in (_file_split(f.relative_to(path)) for f in _data_files(path)) if s))
    if path.is_file() and path.suffix.lower() == ".json":
        return list(_json_splits(_load_json(path)))
    return []


def _file_split(rel: Path) -> str | None:
    """The split a file's name (or its folder's) names: ``train-00000-of-00001.parquet`` is train."""
    for part in [rel.stem, *reversed(rel.parent.parts)]:
        for token in re.split(r"[-_. ]+", part.lower()):
            if token in SPLITS:
                return SPLITS[token]
    return None


def _data_files(path: Path) -> list[Path]:
    files = [
        p
        for p in sorted(path.rglob("*"))
        if p.is_file()
        and p.suffix.lower() in DATA_SUFFIXES
        and p.name not in _SAVED_META
        and not any(x.startswith(".") for x in p.relative_to(path).parts)
    ]
    if not files:
        raise BadInput(f"{path}: no {', '.join(DATA_SUFFIXES)} files and not a saved dataset")
    return files


def _split_files(path: Path, split: str | None) -> list[Path]:
    """The data files of one split of a folder (all of them when no name carries a split)."""
    files = _data_files(path)
    named = {f: _file_split(f.relative_to(path)) for f in files}
    if not any(named.values()):
        if split is not None and canonical_split(split) != "train":
            raise BadInput(f"{path}: no split {split!r} (no file name says train, test or validation)")
        return files
    loose = [f for f, s in named.items() if s is None]
    if loose:
        raise BadInput(
            f"{path}: {loose[0].relative_to(path)} names no split while other files do "
            f"(train.*, test.*, validation.*); rename it, or give one file"
        )
    chosen = pick_split(
        None if split is None else canonical_split(split),
        list(dict.fromkeys(s for s in named.values() if s is not None)),
        path,
    )
    return [f for f, s in named.items() if s == chosen]


# -- datasets ----------------------------------------------------------------------------------


def _is_saved_dataset(path: Path) -> bool:
    return any((path / name).exists() for name in ("dataset_info.json", "state.json", "dataset_dict.json"))


def _saved_items(path: Path, split: str | None, batch_size: int, cap: int | None) -> Iterator[Item]:
    """Rows of a ``save_to_disk`` folder: a Dataset, or the chosen split of a DatasetDict."""
    import datasets

    try:
        ds = datasets.load_from_disk(str(path))
    except Exception as exc:  # datasets raises several types for a damaged folder
        raise BadInput(f"{path}: not a readable saved dataset ({type(exc).__name__}: {exc})") from None
    name = str(path)
    if isinstance(ds, datasets.DatasetDict):
        key = pick_split(split, list(ds), path)
        ds, name = ds[key], f"{path}/{key}"
    elif split is not None and canonical_split(split) != "train":
        raise BadInput(f"{path}: a saved Dataset is one split; it has no split {split!r}")
    for start in range(0, len(ds), batch_size):
        batch = ds[start : start + batch_size]
        for j, values in enumerate(zip(*batch.values(), strict=True)):
            where = f"{name}: row {start + j}"
            yield where, f"{path.name}:{start + j}", _row_bytes_ok(where, dict(zip(batch, values, strict=True)), cap)


def _memory_items(ds: Any, name: str, cap: int | None) -> Iterator[Item]:
    for i, raw in enumerate(ds):
        yield f"{name}[{i}]", f"{name}:{i}", _row_bytes_ok(f"{name}[{i}]", raw, cap)


def _streamed_files(path: Path) -> Iterator[Item]:
    import datasets

    files = _data_files(path) if path.is_dir() else [path]
    kinds = {p.suffix for p in files}
    if len(kinds) != 1:
        raise BadInput(f"{path}: streaming needs files of one kind, found {sorted(kinds) or 'none'}")
    builder = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".txt": "text", ".csv": "csv"}.get(kinds.pop())
    if builder is None:
        raise BadInput(f"{path}: streaming reads .jsonl, .json, .parquet, .txt or .csv files")
    ds = datasets.load_dataset(builder, data_files=[str(p) for p in files], split="train", streaming=True)
    yield from _memory_items(ds, path.name, MAX_ROW_BYTES)
