"""Streaming sources: every input kind becomes an iterator of ``{id, text, meta}``.

Nothing is loaded whole: JSON Lines and text are read line by line, Parquet in
record batches, a saved HF dataset through its memory-mapped Arrow files, and
``datasets`` streaming mode as it comes. A malformed line stops with
``file:line: reason``, or is skipped and counted when the caller asks for it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Iterator, Literal

from trainteam.curation.jsonl import SkipCounter, iter_jsonl
from trainteam.core.errors import BadInput

__all__ = ["SkipCounter", "iter_records", "source_name"]


def source_name(source: Any) -> str:
    if isinstance(source, (str, Path)):
        return str(source)
    return type(source).__name__


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
    meta = raw.get("meta") if isinstance(raw.get("meta"), dict) else {
        k: v for k, v in raw.items() if k not in (text_field, "id", "meta")
    }
    rid = raw.get("id")
    return {"id": str(rid) if rid is not None else default_id, "text": text, "meta": meta}


def _shape(
    items: Iterable[tuple[str, str, Any]], text_field: str, skip_bad: bool, skipped: SkipCounter | None
) -> Iterator[dict]:
    for where, default_id, raw in items:
        try:
            yield _to_record(raw, where, default_id, text_field)
        except BadInput as exc:
            if not skip_bad:
                raise
            if skipped is not None:
                skipped.add(str(exc))


def _good_lines(path: Path, skip_bad: bool, skipped: SkipCounter | None) -> Iterator[tuple[str, str, Any]]:
    lineno_of = _LineTracker()
    for obj in iter_jsonl(path, skip_bad=skip_bad, skipped=skipped, on_line=lineno_of):
        yield f"{path}:{lineno_of.n}", f"{path.stem}:{lineno_of.n}", obj


class _LineTracker:
    def __init__(self) -> None:
        self.n = 0

    def __call__(self, n: int) -> None:
        self.n = n


def _txt_items(path: Path, mode: str) -> Iterator[tuple[str, str, Any]]:
    with path.open("r", encoding="utf-8") as fh:
        if mode == "file":
            yield f"{path}:1", path.stem, fh.read()
            return
        buf: list[str] = []
        start = 0
        try:
            for lineno, line in enumerate(fh, 1):
                if mode == "line":
                    if line.strip():
                        yield f"{path}:{lineno}", f"{path.stem}:{lineno}", line.rstrip("\n")
                    continue
                if line.strip():
                    if not buf:
                        start = lineno
                    buf.append(line.rstrip("\n"))
                elif buf:
                    yield f"{path}:{start}", f"{path.stem}:{start}", "\n".join(buf)
                    buf = []
        except UnicodeDecodeError as exc:
            raise BadInput(f"{path}:{lineno + 1}: not UTF-8 ({exc.reason})") from None
        if buf:
            yield f"{path}:{start}", f"{path.stem}:{start}", "\n".join(buf)


def _parquet_items(path: Path, batch_size: int) -> Iterator[tuple[str, str, Any]]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a bad file
        raise BadInput(f"{path}: not a readable Parquet file ({exc})") from None
    row = 0
    for batch in pf.iter_batches(batch_size=batch_size):
        for raw in batch.to_pylist():
            yield f"{path}:row {row}", f"{path.stem}:{row}", raw
            row += 1


def _dataset_items(ds: Any, name: str) -> Iterator[tuple[str, str, Any]]:
    for i, raw in enumerate(ds):
        yield f"{name}[{i}]", f"{name}:{i}", raw


def _is_saved_dataset(path: Path) -> bool:
    return (path / "dataset_info.json").exists() or (path / "state.json").exists() or (path / "dataset_dict.json").exists()


def iter_records(
    source: Any,
    *,
    text_field: str = "text",
    skip_bad: bool = False,
    skipped: SkipCounter | None = None,
    txt_mode: Literal["paragraph", "line", "file"] = "paragraph",
    streaming: bool = False,
    batch_size: int = 1024,
) -> Iterator[dict]:
    """Stream ``{id, text, meta}`` from a list, ``.jsonl``, ``.txt``, ``.parquet``, a folder
    (a ``save_to_disk`` dataset, or data files read in name order), or a ``datasets``
    Dataset / IterableDataset. ``streaming=True`` reads files through ``datasets``'
    streaming mode. Records without an ``id`` get ``<source>:<position>``."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.exists():
            raise BadInput(f"{path}: no such file or folder")
        if streaming:
            yield from _shape(_streamed_files(path), text_field, skip_bad, skipped)
            return
        if path.is_dir():
            if _is_saved_dataset(path):
                import datasets

                ds = datasets.load_from_disk(str(path))
                if isinstance(ds, datasets.DatasetDict):
                    raise BadInput(f"{path}: a DatasetDict; pass the split folder ({', '.join(ds)})")
                yield from _shape(_dataset_items(ds, path.name), text_field, skip_bad, skipped)
                return
            files = sorted(p for p in path.iterdir() if p.suffix in _SUFFIXES)
            if not files:
                raise BadInput(f"{path}: no {', '.join(_SUFFIXES)} files and not a saved dataset")
            for f in files:
                yield from iter_records(f, text_field=text_field, skip_bad=skip_bad, skipped=skipped, txt_mode=txt_mode)
            return
        suffix = path.suffix.lower()
        if suffix == ".jsonl":
            yield from _shape(_good_lines(path, skip_bad, skipped), text_field, skip_bad, skipped)
        elif suffix == ".txt":
            yield from _shape(_txt_items(path, txt_mode), text_field, skip_bad, skipped)
        elif suffix == ".parquet":
            yield from _shape(_parquet_items(path, batch_size), text_field, skip_bad, skipped)
        else:
            raise BadInput(f"{path}: unknown source type {suffix!r} (use {', '.join(_SUFFIXES)} or a folder)")
        return
    if isinstance(source, dict) or not hasattr(source, "__iter__"):
        raise BadInput(f"source: expected a path, a list of records or a dataset, got {type(source).__name__}")
    yield from _shape(_dataset_items(source, "source"), text_field, skip_bad, skipped)


_SUFFIXES = (".jsonl", ".txt", ".parquet")


def _streamed_files(path: Path) -> Iterator[tuple[str, str, Any]]:
    import datasets

    files = sorted(p for p in path.iterdir() if p.suffix in _SUFFIXES) if path.is_dir() else [path]
    kinds = {p.suffix for p in files}
    if len(kinds) != 1:
        raise BadInput(f"{path}: streaming needs files of one kind, found {sorted(kinds) or 'none'}")
    builder = {".jsonl": "json", ".parquet": "parquet", ".txt": "text"}[kinds.pop()]
    ds = datasets.load_dataset(builder, data_files=[str(p) for p in files], split="train", streaming=True)
    yield from _dataset_items(ds, path.name)
