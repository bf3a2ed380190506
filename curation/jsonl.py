"""JSON Lines in and out: the one on-disk record format every stage shares.

Reading streams line by line (constant memory) and a malformed line stops with
``file:line: reason`` -- or, when the caller asks for skipping, is counted, never
silently dropped.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from trainteam.core.errors import BadInput


def bounded_lines(fh: IO[bytes], path: Path, max_line_bytes: int | None) -> Iterator[tuple[int, bytes]]:
    """``(line number, bytes)`` of each line of a binary file; a line longer than ``max_line_bytes``
    stops with ``file:line`` and the bound before more of it is read (a 5 GB one-line file never
    lands in memory whole). ``None``: no bound (the product's own files)."""
    if max_line_bytes is None:
        yield from enumerate(fh, 1)
        return
    lineno = 0
    while True:
        raw = fh.readline(max_line_bytes + 1)
        if not raw:
            return
        lineno += 1
        if len(raw) > max_line_bytes and not (len(raw) == max_line_bytes + 1 and raw.endswith(b"\n")):
            raise BadInput(f"{path}:{lineno}: {too_long(max_line_bytes)}")
        yield lineno, raw


def too_long(max_bytes: int) -> str:
    """The reason a row over the bound is refused, with the way to raise the bound."""
    return (
        f"a row of more than {max_bytes:,} bytes (the bound on one row; split it, or raise data.max_row_bytes "
        "in the task)"
    )


class SkipCounter:
    """Counts (and remembers the first few) lines skipped by a lenient reader."""

    def __init__(self) -> None:
        self.count = 0
        self.examples: list[str] = []

    def add(self, where: str) -> None:
        self.count += 1
        if len(self.examples) < 5:
            self.examples.append(where)


def iter_jsonl(
    path: str | Path,
    *,
    skip_bad: bool = False,
    skipped: SkipCounter | None = None,
    on_line: Callable[[int], None] | None = None,
    max_line_bytes: int | None = None,
) -> Iterator[dict[str, Any]]:
    """Yield one dict per non-blank line. Bad lines raise ``BadInput("file:line: reason")``
    unless ``skip_bad``, in which case they are counted in ``skipped``. ``on_line`` is told
    the line number of each record just before it is yielded. A line over ``max_line_bytes``
    stops (never skipped: it is a row, too long)."""
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path}: no such file")
    with path.open("rb") as fh:  # bytes, decoded line by line: an encoding error names its own line
        for lineno, raw in bounded_lines(fh, path, max_line_bytes):
            if lineno == 1:
                raw = raw.removeprefix(b"\xef\xbb\xbf")  # a byte-order mark some editors write
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise BadInput(f"{path}:{lineno}: not UTF-8 ({exc.reason})") from None
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                reason = f"{path}:{lineno}: invalid JSON ({exc.msg} at column {exc.colno})"
                if skip_bad:
                    if skipped is not None:
                        skipped.add(reason)
                    continue
                raise BadInput(reason) from None
            if not isinstance(obj, dict):
                reason = f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}"
                if skip_bad:
                    if skipped is not None:
                        skipped.add(reason)
                    continue
                raise BadInput(reason)
            if on_line is not None:
                on_line(lineno)
            yield obj


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """All records of a JSON Lines file; a malformed line raises ``BadInput`` naming ``file:line``."""
    return list(iter_jsonl(path))


def write_jsonl(records: Iterable[Mapping[str, Any]], path: str | Path) -> Path:
    """Write records atomically (temp file + rename) so a crash never leaves half a dataset."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with tmp.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False))
            fh.write("\n")
    os.replace(tmp, path)
    return path
