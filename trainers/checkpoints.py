"""Periodic checkpoints and ``resume="auto"``: the latest *complete* checkpoint wins.

transformers writes ``trainer_state.json`` last when it saves, so a save cut short by
kill -9 leaves a folder without it (or with weights missing). Such a folder is moved
aside with a warning instead of being resumed from or rotated in with good ones.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from trainteam.errors import BadInput

log = logging.getLogger("trainteam.trainers")

PREFIX = "checkpoint-"
_STEP = re.compile(rf"^{PREFIX}(\d+)$")
WEIGHTS = ("model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json")


def checkpoint_step(path: Path) -> int | None:
    m = _STEP.match(Path(path).name)
    return int(m.group(1)) if m else None


def is_complete(path: Path) -> bool:
    """Trainer state readable and a safetensors weight file present."""
    path = Path(path)
    try:
        json.loads((path / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return any((path / w).is_file() for w in WEIGHTS)


def list_checkpoints(output_dir: Path) -> list[Path]:
    """All ``checkpoint-N`` folders, oldest first (complete or not)."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [p for p in output_dir.iterdir() if p.is_dir() and checkpoint_step(p) is not None]
    return sorted(found, key=lambda p: checkpoint_step(p) or 0)


def complete_checkpoints(output_dir: Path) -> list[Path]:
    return [p for p in list_checkpoints(output_dir) if is_complete(p)]


def latest_complete(output_dir: Path, *, quarantine: bool = True) -> Path | None:
    """The newest complete checkpoint; newer incomplete ones are warned about and moved aside."""
    latest = None
    for ckpt in reversed(list_checkpoints(output_dir)):
        if is_complete(ckpt):
            latest = ckpt
            break
        log.warning("checkpoint %s is incomplete (interrupted save); skipping it", ckpt)
        if quarantine and int(os.environ.get("RANK", "0")) == 0:
            dest = ckpt.with_name(ckpt.name.replace(PREFIX, "incomplete-", 1))
            if dest.exists():
                shutil.rmtree(dest)
            try:
                ckpt.rename(dest)
            except FileNotFoundError:  # another process moved it first
                pass
    rollback = _latest_rollback(output_dir)
    if rollback is not None and (latest is None or _state_step(rollback) > (checkpoint_step(latest) or 0)):
        # An approved spike restart that was interrupted before its first save continues from
        # its rollback (bad batches skipped, LR scaled), not from the older plain checkpoint.
        return rollback
    return latest


def _state_step(path: Path) -> int:
    try:
        return int(json.loads((Path(path) / "trainer_state.json").read_text())["global_step"])
    except (OSError, ValueError, KeyError):
        return -1


def _latest_rollback(output_dir: Path) -> Path | None:
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return None
    found = [p for p in output_dir.glob("rollback-*") if (p / ".ready").is_file() and is_complete(p)]
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
    if not is_complete(path):
        raise BadInput(f"resume: {path} is incomplete (no trainer_state.json or no safetensors weights)")
    return path


def checkpoint_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())
