"""One MCP tool per training method: ``pretrain_model``, ``train_sft``, ``train_dpo``, ``train_grpo``.

Each is ``execute_workflow`` on a task the tool writes from its arguments: the model, the data, the
budget and the stage's settings, with the tool's method as the last stage (after ``before``, the
stages it builds on: an align method needs an SFT stage before it). So a training call is a run like
any other: planned first, checked by the task's own rules (the one-line errors of a task file), under
its budget, with ``register_model`` waiting for a person. The argument models are the task's own
(``ModelSpec``, ``DataSpec``, ``BudgetSpec``, ``TrainConfig``, ``GateSpec``), so a client sees their
fields and descriptions in the tool's schema.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from trainteam.contract.step_io import PlanFirstArgs
from trainteam.contract.train_task import BudgetSpec, DataSpec, GateSpec
from trainteam.curation.answers import AnswerSpec
from trainteam.mcp_server.mcp_tools import MAX_WAIT_S, ExecuteWorkflowArgs, execute_workflow
from trainteam.trainers.methods import dpo, grpo, pretrain, sft
from trainteam.trainers.training.config import Method, ModelSpec, TrainConfig

Before = Literal["pretrain", "sft"]


class _TrainArgs(PlanFirstArgs):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64, description="the task's name")
    model: ModelSpec = Field(description="model.path: a local model folder to continue; else a new model's shape")
    data: DataSpec = Field(description="data.path (a file or folder of rows), or data.demo (a bundled task)")
    budget: BudgetSpec = Field(description="the run's ceiling: max_wall_minutes (and cost)")
    training: dict[Method, TrainConfig] = Field(
        default_factory=dict, description="per-stage settings (omitted: the training engineer searches the recipe)"
    )
    gates: dict[Method, GateSpec] = Field(
        default_factory=dict, description="per-stage gates (metric, min or max_regression)"
    )
    answer: AnswerSpec | None = Field(None, description="how an answer is checked (exact, regex, choice, verifier)")
    require_approval: list[str] = Field(default_factory=list, description="steps that wait for a person first")
    run_id: str | None = Field(None, description="choose the run id (default: generated)")
    wait_seconds: float = Field(
        60.0,
        ge=0,
        le=MAX_WAIT_S,
        description="how long the call waits for the run to end "
        "or to wait for a person; it returns then with the run's status",
    )


class PretrainArgs(_TrainArgs):
    """Pretrain a model (from scratch, or continue model.path) on text rows: a train_model run with one
    pretrain stage, under its budget; registering the model waits for a person."""


class TrainSftArgs(_TrainArgs):
    """Supervised fine-tuning (TRL SFTTrainer) of a model on prompt/completion or chat rows: a train_model
    run whose last stage is sft, under its budget; registering the model waits for a person."""

    before: list[Literal["pretrain"]] = Field(
        default_factory=list,
        description="[pretrain] for a model trained from scratch first; [] to fine-tune model.path",
    )


def _after_sft() -> list[Before]:
    return ["sft"]


class TrainDpoArgs(_TrainArgs):
    """Direct preference optimisation (TRL DPOTrainer) on chosen/rejected rows: a train_model run whose last
    stage is dpo, after the stages in before; registering the model waits for a person."""

    before: list[Before] = Field(
        default_factory=_after_sft, description="stages before dpo (dpo needs sft or pretrain first)"
    )


class TrainGrpoArgs(_TrainArgs):
    """Group relative policy optimisation (TRL GRPOTrainer) with verifiable rewards (the answer spec): a
    train_model run whose last stage is grpo, after the stages in before; registering waits for a person."""

    before: list[Before] = Field(
        default_factory=_after_sft, description="stages before grpo (grpo needs sft or pretrain first)"
    )


def _task(args: _TrainArgs, method: str) -> dict[str, Any]:
    """The task file's fields, as a person would write them (what the run records and replays)."""
    dump = lambda m: m.model_dump(mode="json", exclude_unset=True)  # noqa: E731
    stages = [*getattr(args, "before", []), method]
    task: dict[str, Any] = {
        "name": args.name,
        "model": dump(args.model),
        "data": dump(args.data),
        "budget": dump(args.budget),
        "stages": stages,
        "training": {k: dump(v) for k, v in args.training.items()},
        "gates": {k: dump(v) for k, v in args.gates.items()},
        "require_approval": args.require_approval,
    }
    if args.answer is not None:
        task["answer"] = args.answer.model_dump(mode="json")
    return task


def _train(method: str):
    def run(ws_root, open_ws, args: _TrainArgs) -> dict[str, Any]:
        call = ExecuteWorkflowArgs(
            task=_task(args, method),
            run_id=args.run_id,
            wait_seconds=args.wait_seconds,
            execute=args.execute,
            reason=args.reason,
        )
        out = execute_workflow(ws_root, open_ws, call)
        out["tool"] = {"pretrain": "pretrain_model"}.get(method, f"train_{method}")
        if not out["executed"]:
            out["next"] = f"call {out['tool']} again with execute: true to start the run"
        return out

    run.__name__ = f"train_{method}"
    return run


pretrain_model = _train(pretrain.METHOD.name)
train_sft = _train(sft.METHOD.name)
train_dpo = _train(dpo.METHOD.name)
train_grpo = _train(grpo.METHOD.name)

TRAIN_TOOLS = (
    ("pretrain_model", PretrainArgs, pretrain_model),
    ("train_sft", TrainSftArgs, train_sft),
    ("train_dpo", TrainDpoArgs, train_dpo),
    ("train_grpo", TrainGrpoArgs, train_grpo),
)
