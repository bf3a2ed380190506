"""Dataset versions: their content-derived names, and the facts a caller records for them.

A version's key is a hash of what determines its content: the fingerprints of its
inputs and the parameters. The same inputs and parameters therefore name the same
version, and a caller that finds the version already recorded (with its file still
on disk and unchanged) can skip the work. The data engine keeps no record itself: it
returns a ``DatasetFacts`` for each version it builds, and reads earlier ones through a
``Recorded`` lookup the caller gives (the workflow steps keep them in the knowledge graph).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from itertools import chain
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from trainteam.core.errors import BadInput
from trainteam.core.hashing import file_fingerprint
from trainteam.curation.jsonl import write_jsonl

# The recorded facts of a version key (its ``path``, ``content_hash``, ...), or None.
Recorded = Callable[[str], Mapping[str, Any] | None]


class DatasetFacts(BaseModel):
    """A dataset version just built, as its caller records it."""

    key: str
    path: str
    content_hash: str
    counts: dict[str, int]
    params: dict[str, Any]
    inputs: list[tuple[str, str]] = Field(description="(fingerprint, name) of each input it was built from")
    checked_against: list[tuple[str, str]] = Field(
        default_factory=list, description="(fingerprint, name) of each eval set it was decontaminated against"
    )
    builder: str | None = None
    report: str | None = None


class RecordsFingerprint:
    """BLAKE2b-128 of records as sorted-key JSON lines, fed a batch at a time (a stream read once)."""

    def __init__(self) -> None:
        self._h = hashlib.blake2b(digest_size=16)

    def update(self, records: Iterable[Mapping[str, Any]]) -> None:
        for rec in records:
            self._h.update(json.dumps(rec, sort_keys=True, default=str).encode() + b"\n")

    def hexdigest(self) -> str:
        return self._h.hexdigest()


def records_fingerprint(records: Iterable[Mapping[str, Any]]) -> str:
    fp = RecordsFingerprint()
    fp.update(records)
    return fp.hexdigest()


def source_fingerprint(source: Any) -> str | None:
    """A content fingerprint known before reading the source, or None (a one-shot stream)."""
    if isinstance(source, (str, Path)):
        return file_fingerprint(source)
    fp = getattr(source, "_fingerprint", None)  # datasets.Dataset
    if isinstance(fp, str):
        return f"hf-{fp}"
    if isinstance(source, (list, tuple)):
        return records_fingerprint(r if isinstance(r, Mapping) else {"text": r} for r in source)
    return None


def version_key(kind: str, inputs: Mapping[str, str], params: Mapping[str, Any]) -> str:
    blob = json.dumps({"kind": kind, "inputs": dict(inputs), "params": params}, sort_keys=True, default=str)
    return f"{kind}-{hashlib.blake2b(blob.encode(), digest_size=10).hexdigest()}"


def intact(recorded: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """A recorded version if its output file is still there and unchanged, else None."""
    if recorded is None:
        return None
    path = recorded.get("path")
    if not path or not Path(path).exists() or file_fingerprint(path) != recorded.get("content_hash"):
        return None
    return recorded


def materialize(
    kind: str,
    inputs: Mapping[str, Any],
    params: Mapping[str, Any],
    build: Callable[[], Iterable[Mapping[str, Any]]],
    out_dir: str | Path,
    recorded: Recorded | None = None,
) -> tuple[str, Path, DatasetFacts | None]:
    """Build a derived dataset once: ``(version, path, facts)``; ``facts`` is None when reused.

    ``inputs`` are the sources (paths, record lists, saved datasets) the build reads;
    their fingerprints and ``params`` name the version. When ``recorded`` knows that
    version with its file intact, ``build`` is not called; otherwise its records are
    written to ``out_dir/<version>.jsonl`` and the facts to record come back."""
    fps = {}
    for name, src in inputs.items():
        fp = source_fingerprint(src)
        if fp is None:
            raise BadInput(f"{kind} input {name!r}: a one-shot stream cannot be versioned; pass a file or a list")
        fps[name] = fp
    key = version_key(kind, fps, params)
    node = intact(recorded(key)) if recorded is not None else None
    if node is not None:
        return key, Path(node["path"]), None
    names = {name: str(src) if isinstance(src, (str, Path)) else name for name, src in inputs.items()}
    records = iter(build())
    first = next(records, None)
    if first is None:  # a version of 0 rows would be recorded and handed on as a dataset
        raise BadInput(f"{', '.join(names.values())}: no {kind} row is built from it (it has none that qualify)")
    path = write_jsonl(chain([first], records), Path(out_dir) / f"{key}.jsonl")
    facts = DatasetFacts(
        key=key,
        path=str(path),
        content_hash=file_fingerprint(path),
        counts={"output": sum(1 for _ in path.open("rb"))},
        params=dict(params),
        inputs=[(fp, names[name]) for name, fp in fps.items()],
        builder=kind,
    )
    return key, path, facts
