"""What training and evaluation hand back: typed, JSON-serialisable, no torch."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field


class RestartProposal(BaseModel):
    """A loss-spike restart for a person to approve: roll back, skip the bad data, calm the LR."""

    spike_step: int
    rollback_checkpoint: Path
    skip_batches: int = Field(ge=0)
    lr_scale: float = Field(gt=0)
    reason: str
    evidence: dict[str, Any] = Field(default_factory=dict)


class TrainReport(BaseModel):
    method: str
    steps_done: int
    losses: list[tuple[int, float]] = Field(default_factory=list)
    metrics: dict[str, Any] = Field(default_factory=dict)
    checkpoints: list[Path] = Field(default_factory=list)
    final_dir: Path
    stopped_reason: Literal["completed", "spike", "interrupted", "budget"] = "completed"
    proposal: RestartProposal | None = None
    spike_evidence: dict[str, Any] | None = Field(
        default=None,
        description="what the monitor saw (value, window mean and std, z), also when no checkpoint allows a proposal",
    )
    telemetry: dict[str, Any] = Field(default_factory=dict)
    resumed_from: Path | None = None
    log_history: list[dict[str, Any]] = Field(default_factory=list, description="every numeric log entry, by step")


class EvalResult(BaseModel):
    accuracy: float
    n: int
    correct: int
    samples: list[dict[str, Any]] = Field(default_factory=list)
