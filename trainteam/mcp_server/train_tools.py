"""One MCP tool per training method, made from the method registry (``trainers/methods/``): its record's
``tool_name`` (``pretrain_model``, ``train_sft``, ``train_dpo``, ``train_grpo``, ``train_kto``) and ``tool_doc``.

Each is ``execute_workflow`` on a task the tool writes from its arguments: the model, the data, the
budget and the stage's settings, with the tool's method as the last stage (after ``before``, the
stages it builds on: an align method needs a training stage before it, a fine-tuning method may follow the
method that trains from random init). So a training call is a run like any other: planned first, checked by
the task's own rules (the one-line errors of a task file), under its budget, with ``register_model`` waiting
for a person. The argument models are the task's own (``ModelSpec``, ``DataSpec``, ``BudgetSpec``,
``TrainConfig``, ``GateSpec``), so a client sees their fields and descriptions in the tool's schema. A method
added to the registry gets its tool here with no edit.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from trainteam.contract.step_io import PlanFirstArgs
from trainteam.contract.train_task import BudgetSpec, DataSpec, GateSpec
from trainteam.curation.answers import AnswerSpec
from trainteam.mcp_server.mcp_tools import MAX_WAIT_S, ExecuteWorkflowArgs, execute_workflow
from trainteam.trainers.methods.base import TrainingMethod
from trainteam.trainers.methods.method_registry import fine_tune_method, methods, train_methods
from trainteam.trainers.training.config import Method, ModelSpec, TrainConfig


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


def _train(method: str, tool: str):
    def run(ws_root, open_ws, args: _TrainArgs) -> dict[str, Any]:
        call = ExecuteWorkflowArgs(
            task=_task(args, method),
            run_id=args.run_id,
            wait_seconds=args.wait_seconds,
            execute=args.execute,
            reason=args.reason,
        )
        out = execute_workflow(ws_root, open_ws, call)
        out["tool"] = tool
        if not out["executed"]:
            out["next"] = f"call {tool} again with execute: true to start the run"
        return out

    run.__name__ = tool
    return run


def _before(method: TrainingMethod) -> tuple[Any, Any] | None:
    """The ``before`` field of a method's tool: the training stages an align method follows (a fine-tuning one
    by default), or the stage that trains from random init a fine-tuning method may follow; None for that
    stage itself."""
    if method.kind == "align":
        trained = train_methods()
        return list[Literal[trained]], Field(  # type: ignore[valid-type]
            default_factory=lambda: [fine_tune_method()],
            description=f"stages before {method.name} ({method.name} needs {' or '.join(trained)} first)",
        )
    scratch = tuple(m.name for m in methods() if m.from_scratch and m.name != method.name)
    if not scratch:
        return None
    return list[Literal[scratch]], Field(  # type: ignore[valid-type]
        default_factory=list,
        description=f"[{scratch[0]}] for a model trained from scratch first; [] to fine-tune model.path",
    )


def tool_args(method: TrainingMethod) -> type[BaseModel]:
    """The argument model of a method's tool: the common fields, its ``before``, its record's ``tool_doc``."""
    before = _before(method)
    fields: dict[str, Any] = {} if before is None else {"before": before}
    name = "".join(part.capitalize() for part in method.tool_name.split("_")) + "Args"
    model = create_model(name, __base__=_TrainArgs, __doc__=method.tool_doc or method.tool_name, **fields)
    model.__module__ = __name__
    return model


def train_tools() -> tuple[tuple[str, type[BaseModel], Any], ...]:
    """``(tool name, argument model, function)`` per training method, in the registry's order."""
    return tuple((m.tool_name, tool_args(m), _train(m.name, m.tool_name)) for m in methods())


TRAIN_TOOLS = train_tools()
