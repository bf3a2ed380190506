"""A persona as a pydantic-ai Agent: typed deps, typed arguments, typed output, only its own tools.

Each step tool of ``agents/tools`` becomes a pydantic-ai ``Tool`` with a pydantic
argument model. The card decides how it may be called:

- ``plan_first``: without ``execute=true`` the tool returns the plan (for training:
  the run planner's accounting per stage) and does nothing else;
- ``requires_approval``: executing raises pydantic-ai's ``ApprovalRequired`` unless a
  person approved this very call, so the run ends with ``DeferredToolRequests``.

A tool outside the card is never registered, so an Agent cannot call it: a model that
names one gets pydantic-ai's "unknown tool" retry, then the run fails clearly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_ai import Agent, ApprovalRequired, DeferredToolRequests, ModelRetry, RunContext, Tool

from trainteam.agents.cards import PersonaCard
from trainteam.workflows.steps import TOOLS, StepResult, ToolContext
from trainteam.workflows.steps.train import stage_progress

TRAINING_TOOLS = ("train", "align")  # tools that accept per-stage overrides chosen from the planner


# ------------------------------------------------------------------ arguments
class RunArgs(BaseModel):
    """Arguments of a tool that runs when called."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="", max_length=500, description="why you call it (recorded with the call)")


class PlanFirstArgs(RunArgs):
    execute: bool = Field(default=False, description="false: return the plan only; true: do the work")


class StageOverrides(BaseModel):
    """Settings the engineer may change for a stage, each for a reason the planner gave."""

    model_config = ConfigDict(extra="forbid")
    max_steps: int | None = Field(default=None, gt=0)
    per_device_batch_size: int | None = Field(default=None, gt=0)
    grad_accum: int | None = Field(default=None, gt=0)
    learning_rate: float | None = Field(default=None, gt=0, lt=1)
    precision: Literal["fp32", "fp16", "bf16"] | None = None
    gradient_checkpointing: bool | None = None
    strategy: Literal["single", "ddp", "fsdp", "zero2", "zero3"] | None = None
    seq_len: int | None = Field(default=None, gt=0)


class TrainArgs(PlanFirstArgs):
    overrides: dict[str, StageOverrides] = Field(
        default_factory=dict, description="per-stage settings replacing the task's (from the planner), by stage name")


# --------------------------------------------------------------------- output
class PersonaReport(BaseModel):
    """What a persona says at the end of its step. The tool's StepResult stays authoritative."""

    summary: str = Field(max_length=2000)
    decision: Literal["proceed", "stop", "pass", "fail"] = "proceed"
    reasons: list[str] = Field(default_factory=list)


OUTPUT_TYPES = [PersonaReport, DeferredToolRequests]


# ----------------------------------------------------------------------- deps
@dataclass
class PersonaDeps:
    """Typed deps of every persona: the step's context (workspace, run, task with its budget)."""

    ctx: ToolContext
    card: PersonaCard
    step_tool: str
    segment: str = ""  # transcript name of this agent run (``train#1``); keys its graph facts
    results: dict[str, StepResult] = field(default_factory=dict)
    plans: dict[str, dict] = field(default_factory=dict)

    @property
    def workspace(self) -> Any:
        return self.ctx.ws

    @property
    def run_id(self) -> str:
        return self.ctx.run_id

    @property
    def budget(self) -> Any:
        return self.ctx.task.budget


def tool_view(result: StepResult) -> dict[str, Any]:
    """What the model sees of a tool's result: outcome and numbers, never record contents."""
    view: dict[str, Any] = {"executed": True, "outcome": result.outcome, "summary": result.summary,
                            "metrics": result.metrics, "artifacts": sorted(result.artifacts)}
    for key in ("stage", "reasons", "stages"):
        if key in result.details:
            view[key] = result.details[key]
    return view


# -------------------------------------------------------------------- planning
def _apply_overrides(ctx: ToolContext, overrides: dict[str, StageOverrides]) -> ToolContext:
    from trainteam.trainers.config import TrainConfig

    task = ctx.task
    for stage, ov in overrides.items():
        if stage not in task.stage_names():
            raise ModelRetry(f"overrides: stage {stage!r} is not in the task's stages {task.stage_names()}")
        changes = ov.model_dump(exclude_none=True)
        try:
            cfg = TrainConfig.model_validate({**task.train_config(stage).model_dump(), **changes})
        except ValidationError as exc:
            raise ModelRetry(f"overrides.{stage}: {exc.errors()[0]['msg']}") from None
        task = task.with_training(stage, cfg)
    return replace(ctx, task=task)


def plan_stages(ctx: ToolContext, tool: str) -> dict[str, Any]:
    """The run planner's verdict for each stage this tool would train (no torch): accounting,
    refusals, and the fixes that make a refused stage plan."""
    from trainteam.workflows.curriculum import curriculum_from_task
    from trainteam.workflows.stageplan import plan_stage

    task = ctx.task
    cur = curriculum_from_task(task)
    out: dict[str, Any] = {"tool": tool, "step": ctx.step, "stages": {}}
    total = 0.0
    align = cur.align_stage()
    stages = [s.name for s in cur.training_stages()] if tool == "train" else ([align.name] if align else [])
    for stage in stages:
        # What is left: a stage this visit finished (before a crash, a later stage's spike, an
        # accepted stage gate) is not trained again; one with checkpoints resumes from the newest.
        finished, done_steps = stage_progress(ctx, stage)
        if finished:
            continue
        cfg = task.train_config(stage)
        if ctx.visit > 1 and tool == "train":  # the tool trains twice as long on a retry
            cfg = cfg.model_copy(update={"max_steps": cfg.max_steps * 2})
        verdict = plan_stage(task, stage, cfg)
        left = max(0.0, 1.0 - done_steps / cfg.max_steps)
        total += verdict.est_minutes * left
        out["stages"][stage] = {"max_steps": cfg.max_steps, "per_device_batch_size": cfg.per_device_batch_size,
                                "learning_rate": cfg.learning_rate, "seq_len": cfg.seq_len, "steps_done": done_steps,
                                **verdict.model_dump(exclude={"stage"})}
    # a person approved spending over the budget for this step: the plan informs, it does not refuse
    out["budget_extended_by_person"] = bool(ctx.inputs.get("budget_extended"))
    from trainteam.agents.briefing import spent_minutes

    out["est_minutes"] = round(total, 3)
    # the ceiling the run works under: the task's budget plus what a person granted since
    out["budget_minutes"] = round(ctx.allowed_s / 60, 3) if ctx.allowed_s is not None else task.budget.max_wall_minutes
    out["spent_minutes"] = round(spent_minutes(ctx) or 0.0, 3)  # what the run's earlier steps already took
    return out


def plan_of(ctx: ToolContext, tool: str) -> dict[str, Any]:
    if tool in TRAINING_TOOLS:
        return plan_stages(ctx, tool)
    plan: dict[str, Any] = {"tool": tool, "step": ctx.step, "inputs": {k: str(v) for k, v in ctx.inputs.items()},
                            "will": f"run {tool} for step {ctx.step} of run {ctx.run_id}"}
    if tool == "curate":  # the filters it would apply, chosen for the kind of data
        try:
            from trainteam.workflows.steps.curate import curation_config

            plan["config"] = curation_config(ctx.task).model_dump(mode="json")
        except (ImportError, AttributeError):
            pass
    return plan


# ----------------------------------------------------------------------- tools
def _make_tool(grant) -> Tool:
    name = grant.name
    args_cls = TrainArgs if name in TRAINING_TOOLS else (PlanFirstArgs if grant.plan_first else RunArgs)

    def call(rc: RunContext[PersonaDeps], args: RunArgs) -> dict[str, Any]:
        deps = rc.deps
        ctx = deps.ctx
        if isinstance(args, TrainArgs) and args.overrides:
            ctx = _apply_overrides(ctx, args.overrides)
        if grant.plan_first and not getattr(args, "execute", False):
            deps.plans[name] = plan_of(ctx, name)
            return {"executed": False, "plan": deps.plans[name],
                    "next": f"call {name} again with execute=true to run it"}
        if grant.requires_approval and not rc.tool_call_approved:
            raise ApprovalRequired(metadata={"action": name, "step": ctx.step, "persona": deps.card.name,
                                             "plan": plan_of(ctx, name)})
        result = TOOLS[name](ctx)
        deps.results[name] = result
        return tool_view(result)

    call.__annotations__ = {"rc": RunContext[PersonaDeps], "args": args_cls, "return": dict[str, Any]}
    call.__name__ = name
    call.__doc__ = grant.description
    return Tool(call, name=name, description=grant.description, takes_ctx=True)


def persona_tools(card: PersonaCard) -> list[Tool]:
    """The card's tools that exist in the catalog: nothing else is ever registered."""
    return [_make_tool(g) for g in card.tools if g.name in TOOLS]


def build_agent(card: PersonaCard, model: Any, *, instructions: str, capabilities: list, retries: int = 2) -> Agent:
    return Agent(model, name=card.name, deps_type=PersonaDeps, output_type=OUTPUT_TYPES, instructions=instructions,
                 tools=persona_tools(card), capabilities=capabilities, retries=retries)
