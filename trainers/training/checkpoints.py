"""Periodic checkpoints and ``resume="auto"``: the latest *complete* checkpoint wins.

transformers writes ``trainer_state.json`` last when it saves, so a save cut short by
kill -9 leaves a folder without it (or with weights missing). Such a folder is moved
aside with a warning instead of being resumed from or rotated in with good ones.

Complete also means *verified* (``trainers/training/manifest.py``): every file matches the
manifest written last at save time (size and sha256), or, for a checkpoint without one,
every safetensors file's header accounts for its size. A damaged checkpoint is moved
aside (``damaged-N``) and ``resume="auto"`` says which one it used instead; an explicit
``resume:`` path to it is a one-line BadInput naming the file.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from trainteam.core.errors import BadInput
from trainteam.trainers.training.manifest import manifest_problem, read_manifest, safetensors_problem

log = logging.getLogger("trainteam.trainers")

PREFIX = "checkpoint-"
_STEP = re.compile(rf"^{PREFIX}(\d+)$")
WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json")


def checkpoint_step(path: Path) -> int | None:
    m = _STEP.match(Path(path).name)
    return int(m.group(1)) if m else None


def is_saved(path: Path) -> bool:
    """The save finished: trainer state readable and a safetensors weight file present."""
    path = Path(path)
    try:
        json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return any((path / w).is_file() for w in WEIGHTS)


def damage(path: Path, *, hashes: bool = True) -> str | None:
    """What is wrong with a saved checkpoint's files (``FILE: what``), or None if they verify.

    With a manifest: every listed file has its size (and, with ``hashes``, its sha256).
    Always: every ``*.safetensors`` header is sound, and a sharded index's files exist."""
    path = Path(path)
    try:
        files = read_manifest(path)
    except ValueError as exc:
        return str(exc)
    if files is not None:
        found = manifest_problem(path, files, hashes=hashes)  # a rollback writes its own before .ready
        if found:
            return found
    for st in sorted(path.glob("*.safetensors")):
        found = safetensors_problem(st)
        if found:
            return found
    return _index_problem(path)


def _index_problem(path: Path) -> str | None:
    index = path / "model.safetensors.index.json"
    if not index.is_file():
        return None
    try:
        shards = set(json.loads(index.read_text())["weight_map"].values())
    except (OSError, ValueError, KeyError, AttributeError):
        return f"{index.name}: unreadable"
    missing = sorted(s for s in shards if not (path / s).is_file())
    return f"{missing[0]}: missing (the index names it)" if missing else None


def is_complete(path: Path, *, hashes: bool = True) -> bool:
    """Saved in full and every file verifies (see ``damage``)."""
    return is_saved(path) and damage(path, hashes=hashes) is None


def list_checkpoints(output_dir: Path) -> list[Path]:
    """All ``checkpoint-N`` folders, oldest first (complete or not)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [p for p in output_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(found, key=lambda p: checkpoint_step(p) or 0)


def complete_checkpoints(output_dir: Path) -> list[Path]:
    """Saved checkpoints whose files have their recorded sizes and sound headers (not hashed:
    resuming hashes the one it picks, ``prepare_rollback`` the one it copies)."""
    return [p for p in list_checkpoints(output_dir) if is_complete(p, hashes=False)]


def latest_complete(output_dir: Path, *, quarantine: bool = True) -> Path | None:
    """The newest complete checkpoint; newer incomplete or damaged ones are warned about (naming
    the checkpoint used instead) and moved aside."""
    latest, skipped = None, []
    for ckpt in reversed(list_checkpoints(output_dir)):
        why = "incomplete (interrupted save)" if not is_saved(ckpt) else None
        found = None if why else damage(ckpt)
        if why is None and found is None:
            latest = ckpt
            break
        kind = "incomplete" if why else "damaged"
        skipped.append((ckpt, why or f"damaged ({found})", _move_aside(ckpt, kind) if quarantine else None))
    rollback = _latest_rollback(output_dir, quarantine=quarantine)
    if rollback is not None and (latest is None or _state_step(rollback) > (checkpoint_step(latest) or 0)):
        # An approved spike restart that was interrupted before its first save continues from
        # its rollback (bad batches skipped, LR scaled), not from the older plain checkpoint.
        latest = rollback
    for ckpt, why, dest in skipped:
        log.warning(
            "checkpoint %s is %s; skipping it%s; resuming from %s",
            ckpt,
            why,
            f" (moved aside to {dest.name})" if dest else "",
            latest or "scratch (no complete checkpoint)",
        )
    return latest


def _move_aside(ckpt: Path, kind: str) -> Path | None:
    """Rename ``checkpoint-N`` (or ``rollback-N``) to ``KIND-N`` (``KIND-rollback-N``): rank 0 only."""
    if int(os.environ.get("RANK", "0")) != 0:
        return None
    name = ckpt.name.replace(PREFIX, f"{kind}-", 1) if ckpt.name.startswith(PREFIX) else f"{kind}-{ckpt.name}"
    dest = ckpt.with_name(name)
    if dest.exists():
        shutil.rmtree(dest)
    try:
        ckpt.rename(dest)
    except FileNotFoundError:  # another process moved it first
        pass
    return dest


def _state_step(path: Path) -> int:
    try:
        return int(json.loads((Path(path) / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError):
        return -1


def _latest_rollback(output_dir: Path, *, quarantine: bool = True) -> Path | None:
    """The newest prepared rollback that verifies; a damaged one is warned about and moved
    aside (so that the same approved proposal, applied again, prepares it afresh)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    found = []
    for p in output_dir.glob("rollback-*"):
        if not (p / ".ready").is_file():
            continue
        why = "incomplete" if not is_saved(p) else damage(p)
        if why is None:
            found.append(p)
            continue
        dest = _move_aside(p, "damaged") if quarantine else None
        log.warning(
            "rollback %s is damaged (%s); skipping it%s", p, why, f" (moved aside to {dest.name})" if dest else ""
        )
    return max(found, key=_state_step, default=None)


def resolve_resume(resume, output_dir: Path) -> Path | None:
    """Map ``TrainConfig.resume`` to a checkpoint folder, or None for a fresh start."""
    if resume == "never":
        return None
    if resume == "auto":
        return latest_complete(output_dir)
    path = Path(resume)
    if not path.is_dir():
        raise BadInput(f"resume: {path} is not a checkpoint folder")
    if not is_saved(path):
        raise BadInput(f"resume: {path} is incomplete (no trainer_state.json or no safetensors weights)")
    found = damage(path)
    if found:
        raise BadInput(f"resume: {path} is damaged: {found}")
    return path


def checkpoint_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
