"""Helpers for the spine tests: the real CLI in real subprocesses on a temporary workspace.

Imported by name (conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

DATA = Path(__file__).parent / "data"
TINY_TASK = {
    "name": "tiny",
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64},
    "data": {"demo": "addition", "n_train": 400, "n_eval": 16, "max_operand": 20},
    "tokenizer": {"vocab_size": 280},
    "stages": ["pretrain"],
    "training": {"pretrain": {"max_steps": 6, "per_device_batch_size": 8, "seq_len": 32, "save_steps": 3}},
    "gates": {"pretrain": {"metric": "heldout_loss", "max": 50.0}},
    "budget": {"max_wall_minutes": 30},
    "require_approval": [],
}


def write_task(folder: Path, name: str = "task.yaml", **changes) -> Path:
    task = {**TINY_TASK, **changes}
    path = folder / name
    path.write_text(yaml.safe_dump(task))
    return path


def cli(ws: Path, *args: str, timeout: float = 600, check: bool = False,
        env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "trainteam.cli", "-w", str(ws), *args],
                          capture_output=True, text=True, timeout=timeout, env={**_env(), **(env or {})})
    if check and proc.returncode != 0:
        raise AssertionError(f"trainteam {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def spawn(ws: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "trainteam.cli", "-w", str(ws), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**_env(), **(env or {})})


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = "1"
    env["TRAINTEAM_THREADS"] = "1"
    return env


def wait_for(predicate, timeout: float = 600, interval: float = 0.05, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def pending_approvals(ws: Path) -> list[dict]:
    """Read the queue in-process (cheap to poll); decisions still go through the CLI."""
    if not os.environ.get("TRAINTEAM_DATABASE_URL") and not (ws / "trainteam.db").exists():
        return []
    from trainteam.workflows.engine.store import ApprovalStore
    from trainteam.workspace import Workspace

    return ApprovalStore(Workspace.open(ws).engine).list("pending")


def run_view(ws: Path, run_id: str) -> dict:
    from trainteam.workflows.report.views import run_public
    from trainteam.workspace import Workspace

    return run_public(Workspace.open(ws), run_id)
