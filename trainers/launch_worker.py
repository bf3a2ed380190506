"""Entry point of every launched training process: ``python -m trainteam.trainers.launch_worker JOB``.

``accelerate launch`` / ``torchrun`` start this module once per rank; each rank reads the
same job file, trains through ``trainteam.trainers.train`` (the Trainer joins the ranks
into one process group), and writes ``rank<R>.json`` with the world size it actually saw.
That file is the evidence a run was distributed: a launcher that silently starts one
process (``accelerate launch --cpu --num_processes 2``) shows up as world size 1.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from trainteam.core.errors import BadInput, format_validation_error
from trainteam.trainers.config import ModelSpec, TrainConfig
from trainteam.trainers.models import build_model
from trainteam.trainers.tokenizer import load_tokenizer
from trainteam.trainers.training import train


class WorkerJob(BaseModel):
    """What one launched run trains: all paths, so every rank on every node reads the same."""

    model_config = ConfigDict(extra="forbid")

    method: Literal["pretrain", "sft", "dpo", "grpo"] = "sft"
    config: TrainConfig
    model: ModelSpec
    tokenizer: Path
    data: Path
    eval_data: Path | None = None
    results_dir: Path

    @classmethod
    def load(cls, path: Path) -> "WorkerJob":
        path = Path(path)
        if not path.is_file():
            raise BadInput(f"job: {path} not found")
        try:
            return cls.model_validate_json(path.read_text())
        except ValidationError as exc:
            raise BadInput(format_validation_error(exc, str(path))) from None

    def save(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.model_dump_json(indent=2))
        return path


def run_job(job: WorkerJob) -> dict:
    """Train this rank's share of the job and record what the rank saw; returns that record."""
    import torch.distributed as dist

    config = job.config
    if os.environ.get("FSDP_ACTIVATION_CHECKPOINTING", "").lower() == "true":
        # FSDP checkpoints activations itself; transformers refuses both switches at once.
        config = config.model_copy(update={"gradient_checkpointing": False})
    tok = load_tokenizer(job.tokenizer)
    model = build_model(job.model, tok, attn_implementation=config.attn_implementation, seed=config.seed)
    report = train(job.method, config, model, str(job.data), tokenizer=tok,
                   eval_data=str(job.eval_data) if job.eval_data else None, progress=False)
    if dist.is_available() and dist.is_initialized():
        rank, world, backend = dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
    else:
        rank, world, backend = 0, 1, None
    record = {
        "rank": rank, "world_size": world, "backend": backend, "pid": os.getpid(),
        "env_world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "steps": report.steps_done, "losses": report.losses,
        "final_loss": report.losses[-1][1] if report.losses else None,
        "eval_loss": report.metrics.get("eval_loss"), "final_dir": str(report.final_dir),
    }
    job.results_dir.mkdir(parents=True, exist_ok=True)
    (job.results_dir / f"rank{rank}.json").write_text(json.dumps(record))
    return record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m trainteam.trainers.launch_worker JOB.json", file=sys.stderr)
        return 2
    try:
        run_job(WorkerJob.load(Path(argv[0])))
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
