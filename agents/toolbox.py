"""What every tool receives and returns."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

Outcome = Literal["ok", "passed", "failed", "skipped", "spike", "spike_limit", "stage_gate_failed", "over_budget",
                  "needs_approval", "error"]


class StepResult(BaseModel):
    """A step's recorded output: small (paths, metrics), because DBOS checkpoints it."""

    outcome: Outcome = "ok"
    summary: str = ""
    artifacts: dict[str, str] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)
    nodes: dict[str, str] = Field(default_factory=dict, description="graph node ids this step produced")
    details: dict[str, Any] = Field(default_factory=dict)


@dataclass
class ToolContext:
    ws: Any  # trainteam.workspace.Workspace (not imported: tools stay below the shell)
    run_id: str
    step: str
    visit: int
    persona: str
    task: Any  # trainteam.workflows.task.TrainTask
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    inputs: dict[str, Any] = field(default_factory=dict)
    progress: bool = True
    spent_s: float | None = None  # wall seconds the run's steps took so far (the engine measures it)
    allowed_s: float | None = None  # what the run may spend in all: the budget plus extensions a person granted

    @property
    def graph(self):
        return self.ws.graph

    @property
    def run_node(self) -> str:
        return f"Run:{self.run_id}"

    @property
    def step_node(self) -> str:
        return f"Step:{self.run_id}/{self.step}#{self.visit}"

    def output(self, step: str) -> dict[str, Any]:
        """The recorded output of an earlier step; a clear error if it did not run."""
        out = self.outputs.get(step)
        if out is None or out.get("outcome") == "skipped":
            raise LookupError(f"step {self.step!r} needs the output of step {step!r}, which did not run")
        return out

    def latest(self, *steps: str) -> dict[str, Any]:
        """The output of the last of ``steps`` that ran (e.g. sft after pretrain)."""
        for s in reversed(steps):
            out = self.outputs.get(s)
            if out is not None and out.get("outcome") not in ("skipped", None):
                return out
        raise LookupError(f"step {self.step!r} needs one of {list(steps)} to have run")


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def sha256_tree(folder: Path, pattern: str = "*") -> str:
    """Content hash of the files of a folder (names and bytes), order-independent."""
    h = hashlib.sha256()
    for p in sorted(folder.rglob(pattern)):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode())
            h.update(sha256_file(p).encode())
    return h.hexdigest()
