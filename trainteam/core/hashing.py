"""Content hashes of files, folders, checkpoints and step artifacts: the only place file bytes are hashed.

Each hash below is stored somewhere (checkpoint manifests, graph node keys and attributes,
the model registry, replay records), so each keeps its exact recipe:

- ``sha256_file``: sha256 of a file's bytes (manifests, prepared dataset versions).
- ``weights_hash``: sha256 over the sha256s of a checkpoint's ``*.safetensors`` files (the
  Checkpoint node key the train step records).
- ``named_files_hash``: sha256 over each file's name, NUL, bytes, NUL (the registry's model identity).
- ``file_fingerprint``: BLAKE2b-128 of a file's bytes, or of a folder's file names and bytes (dataset
  version lineage in curation).
- ``artifact_hashes``: what two equal runs share among a step's artifacts (replay), with JSON
  files hashed in a canonical form (no timings, the workspace root made relative).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Any

_CHUNK = 1 << 20

# Keys of JSON artifacts that say when or how long, not what: left out of artifact hashes.
_VOLATILE_KEYS = ("seconds", "time", "timestamp", "created_at", "updated_at", "wall", "elapsed", "duration")
# Files of a checkpoint folder that differ between equal runs.
_SKIP = (
    "training_args.bin",
    "trainer_state.json",
    "run-history.jsonl",
    "optimizer.pt",
    "scheduler.pt",
    "trainteam-manifest.json",
)  # the manifest hashes training_args.bin, which names the folder


def sha256_file(path: str | Path) -> str:
    """sha256 of a file's bytes (hex)."""
    with open(path, "rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def weights_hash(folder: str | Path) -> str:
    """sha256 over the sha256s of the ``*.safetensors`` files of a checkpoint folder, in name order."""
    weights = sorted(Path(folder).glob("*.safetensors"))
    return hashlib.sha256("".join(sha256_file(w) for w in weights).encode()).hexdigest()


def named_files_hash(files: Iterable[Path]) -> str:
    """sha256 over each file's name, a NUL, its bytes and a NUL, in the order given."""
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0")
        with f.open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
        h.update(b"\0")
    return h.hexdigest()


def file_fingerprint(path: str | Path) -> str:
    """BLAKE2b-128 of a file's bytes, or of a folder's file names and bytes (sorted)."""
    path = Path(path)
    h = hashlib.blake2b(digest_size=16)
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    for f in files:
        if path.is_dir():
            h.update(str(f.relative_to(path)).encode() + b"\0")
        with f.open("rb") as fh:
            while chunk := fh.read(_CHUNK):
                h.update(chunk)
    return h.hexdigest()


# -- step artifacts -----------------------------------------------------------------------------


def _canonical(value: Any, root: str) -> Any:
    """JSON without timings, with the workspace root made relative: the content, not the occasion."""
    if isinstance(value, dict):
        return {
            k: _canonical(v, root)
            for k, v in value.items()
            if not (k in _VOLATILE_KEYS or k.endswith(("_s", "_seconds", "_at")))
        }
    if isinstance(value, list):
        return [_canonical(v, root) for v in value]
    return value.replace(root, "<workspace>") if isinstance(value, str) else value


def _file_hash(path: Path, root: str) -> str:
    st = path.stat()  # the same checkpoint is an artifact of several steps: hash its bytes once per process
    return _cached_hash(str(path), st.st_size, st.st_mtime_ns, root)


@lru_cache(maxsize=4096)
def _cached_hash(path_s: str, size: int, mtime_ns: int, root: str) -> str:
    path = Path(path_s)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except ValueError:
            return sha256_file(path)
        return hashlib.sha256(json.dumps(_canonical(data, root), sort_keys=True).encode()).hexdigest()
    return sha256_file(path)


def artifact_hashes(artifacts: Mapping[str, str | Path], root: Path | str) -> dict[str, str]:
    """Content hashes of a step's artifacts (name -> file or folder) that two equal runs share:
    weights, configs, tokenizers, data; not timings, pickled arguments, intermediate checkpoints
    or the workspace path."""
    hashes = {}
    for name, value in artifacts.items():
        p = Path(value)
        if p.is_file():
            hashes[name] = _file_hash(p, str(root))
        elif p.is_dir():
            h = hashlib.sha256()
            for f in sorted(p.rglob("*")):
                rel = f.relative_to(p)
                if f.is_file() and f.name not in _SKIP and not any(x.startswith("checkpoint-") for x in rel.parts):
                    h.update(str(rel).encode() + b"\0" + _file_hash(f, str(root)).encode())
            hashes[name] = h.hexdigest()
    return hashes
