"""Helpers for the persona tests: real workspaces, real tasks, real checkpoints (no torch needed).

Imported by name (conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from trainteam.contract.step_io import StepInputs, ToolContext
from trainteam.contract.train_task import TrainTask
from trainteam.graph import NodeKind
from trainteam.workflows.steps import STEPS
from trainteam.workspace import Workspace

TASK = {
    "name": "tiny",
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64},
    "data": {"demo": "addition", "n_train": 300, "n_eval": 20, "max_operand": 20},
    "tokenizer": {"vocab_size": 280},
    "stages": ["pretrain"],
    "training": {"pretrain": {"max_steps": 4, "per_device_batch_size": 8, "seq_len": 32}},
    "gates": {"pretrain": {"metric": "exact_match", "min": 0.8}},
    "budget": {"max_wall_minutes": 30},
}


def task(**changes: Any) -> TrainTask:
    return TrainTask.model_validate({**TASK, **changes})


def ctx(
    ws: Workspace,
    persona: str,
    step: str,
    t: TrainTask | None = None,
    run_id: str = "run1",
    outputs: dict | None = None,
    visit: int = 1,
    inputs: dict | None = None,
    decided: StepInputs | None = None,
) -> ToolContext:
    return ToolContext(
        ws=ws,
        run_id=run_id,
        step=step,
        visit=visit,
        persona=persona,
        task=t or task(),
        outputs=outputs or {},
        inputs=inputs or {},
        decided=decided or StepInputs(),
        toolbox=STEPS,
        progress=False,
    )


def fake_checkpoint(ws: Workspace, name: str = "ckpt") -> Path:
    """A real (tiny) safetensors checkpoint folder, written without torch."""
    from safetensors.numpy import save_file

    folder = ws.root / "checkpoints" / name
    folder.mkdir(parents=True, exist_ok=True)
    save_file({"w": np.arange(12, dtype=np.float32).reshape(3, 4)}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4}))
    return folder


def final_eval_output(ws: Workspace, folder: Path, exact_match: float = 0.95) -> dict[str, Any]:
    node = ws.graph.add_node(NodeKind.CHECKPOINT, folder.name, path=str(folder), stage="sft")
    ev = ws.graph.add_node(NodeKind.EVAL, f"ev-{folder.name}", metrics={"exact_match": exact_match})
    return {
        "outcome": "ok",
        "summary": f"exact match {exact_match:.0%}",
        "metrics": {"exact_match": exact_match},
        "artifacts": {"checkpoint": str(folder), "tokenizer": str(folder)},
        "nodes": {"checkpoint": node, "eval": ev},
        "details": {"stage": "sft"},
    }


def workspace_text(ws: Workspace) -> str:
    """Every byte of the workspace's transcripts, logs, reports and database, as text."""
    chunks = []
    for sub in ("transcripts", "logs", "reports"):
        for p in sorted((ws.root / sub).rglob("*")):
            if p.is_file():
                chunks.append(p.read_bytes().decode("utf-8", "replace"))
    for p in [*ws.root.glob("*.db*"), *ws.root.glob("*.sqlite*")]:
        chunks.append(p.read_bytes().decode("utf-8", "replace"))
    chunks.append(json.dumps(ws.graph.nodes(), default=str))
    return "\n".join(chunks)


def run_py(code: str, *, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(Path(__file__).parent), **(env or {})}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout, env=full)
    if proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


def cli(
    ws: Path, *args: str, input: str | None = None, timeout: float = 600, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainteam.cli", "-w", str(ws), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        input=input,
        env={**os.environ, **(env or {})},
    )
