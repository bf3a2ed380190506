"""Entry point of every launched training process: ``python -m trainteam.trainers.launch.worker JOB``.

``accelerate launch`` / ``torchrun`` start this module once per rank; each rank reads the
same job file, trains through ``trainteam.trainers.train`` (the Trainer joins the ranks
into one process group), and writes ``rank<R>.json`` with the world size it actually saw.
That file is the evidence a run was distributed: a launcher that silently starts one
process (``accelerate launch --cpu --num_processes 2``) shows up as world size 1.

A job launched by a workflow step (``trainers/launch/supervisor.py``) also carries what the step's own
``train()`` call would get: the model as a folder, an approved restart proposal, the answer
rule GRPO's rewards check, and the seconds the run's budget leaves. Each rank writes
``rank<R>.pid`` when it starts (the supervisor watches those processes); rank 0 writes its
whole ``TrainReport`` to ``report.json`` (the run's telemetry, curves and spike evidence). A rank
that raises writes ``rank<R>.error.json`` (the exception, the time) as it dies: a rank killed by a
signal writes none, which is how the supervisor tells it from the peers that die of losing it. A
rank gets SIGTERM if the launcher's agent dies (``PR_SET_PDEATHSIG``): no rank outlives its launch.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import sys
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainteam.core.errors import BadInput, format_validation_error
from trainteam.curation.answers import AnswerSpec
from trainteam.curation.rewards import default_rewards
from trainteam.trainers.fit.loop import train
from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.training import budget
from trainteam.trainers.training.config import Method, ModelSpec, TrainConfig
from trainteam.trainers.training.models import build_model
from trainteam.trainers.training.results import RestartProposal
from trainteam.trainers.training.tokenizer import load_tokenizer


class WorkerJob(BaseModel):
    """What one launched run trains: all paths, so every rank on every node reads the same."""

    model_config = ConfigDict(extra="forbid")

    method: Method = "sft"
    config: TrainConfig
    model: ModelSpec
    tokenizer: Path
    data: Path
    eval_data: Path | None = None
    results_dir: Path
    model_path: Path | None = Field(default=None, description="a model folder to train (instead of building model)")
    apply_proposal: RestartProposal | None = None
    answer: AnswerSpec | None = Field(default=None, description="GRPO: the rule its default rewards check")
    budget_left_s: float | None = Field(default=None, description="seconds the run may still spend (None: no ceiling)")
    budget_allowed_s: float = 0.0

    @classmethod
    def load(cls, path: Path) -> WorkerJob:
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

    rank_env = int(os.environ.get("RANK", "0"))
    job.results_dir.mkdir(parents=True, exist_ok=True)
    (job.results_dir / f"rank{rank_env}.pid").write_text(str(os.getpid()))
    config = job.config
    if os.environ.get("FSDP_ACTIVATION_CHECKPOINTING", "").lower() == "true":
        # FSDP checkpoints activations itself; transformers refuses both switches at once.
        config = config.model_copy(update={"gradient_checkpointing": False})
    tok = load_tokenizer(job.tokenizer)
    model = (
        job.model_path
        if job.model_path is not None
        else build_model(job.model, tok, attn_implementation=config.attn_implementation, seed=config.seed)
    )
    rewards = (
        default_rewards(tok, job.answer) if get_method(job.method).needs_rewards and job.answer is not None else None
    )
    with budget.ceiling(job.budget_left_s, job.budget_allowed_s):
        report = train(
            job.method,
            config,
            model,
            str(job.data),
            tokenizer=tok,
            eval_data=str(job.eval_data) if job.eval_data else None,
            progress=False,
            apply_proposal=job.apply_proposal,
            reward_funcs=rewards,
        )
    if dist.is_available() and dist.is_initialized():
        rank, world, backend = dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
    else:
        rank, world, backend = 0, 1, None
    record = {
        "rank": rank,
        "world_size": world,
        "backend": backend,
        "pid": os.getpid(),
        "env_world_size": int(os.environ.get("WORLD_SIZE", "1")),
        "steps": report.steps_done,
        "losses": report.losses,
        "final_loss": report.losses[-1][1] if report.losses else None,
        "eval_loss": report.metrics.get("eval_loss"),
        "final_dir": str(report.final_dir),
    }
    if rank == 0:  # written before the rank's record: a finished rank's report is there to read
        (job.results_dir / "report.json").write_text(report.model_dump_json())
    (job.results_dir / f"rank{rank}.json").write_text(json.dumps(record))
    return record


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m trainteam.trainers.launch.worker JOB.json", file=sys.stderr)
        return 2
    _die_with_parent()
    try:
        job = WorkerJob.load(Path(argv[0]))
    except BadInput as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        run_job(job)
    except BaseException as exc:  # what this rank died of, for the supervisor (a signal leaves none)
        _record_error(job.results_dir, exc)
        raise
    return 0


def _die_with_parent() -> None:
    """SIGTERM this rank if the launcher's agent dies (its own stop of the ranks cannot run then): the
    rank saves at the next step end and stops, like one the agent stopped (``GracefulStop``)."""
    try:
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (AttributeError, OSError):
        return
    if os.getppid() == 1:  # the agent died before the signal was armed
        os.kill(os.getpid(), signal.SIGTERM)


def _record_error(results_dir: Path, exc: BaseException) -> None:
    rank = os.environ.get("RANK", "0")
    try:
        results_dir.mkdir(parents=True, exist_ok=True)
        (results_dir / f"rank{rank}.error.json").write_text(
            json.dumps(
                {
                    "rank": int(rank),
                    "pid": os.getpid(),
                    "time": time.time(),
                    "error": f"{type(exc).__name__}: {exc}"[:2000],
                }
            )
        )
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
