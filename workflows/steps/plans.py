"""What a plan-first call of a step tool returns, and the training engineer's per-stage overrides.

A plan-first tool called without ``execute=true`` returns its plan and does nothing else:
for ``train`` / ``align`` the run planner's accounting per stage still to train (no torch),
for ``curate`` the filters it would apply, for the rest what it would run. ``TrainArgs``
lets the engineer change a stage's settings for a reason the planner gave; they pass the
same TrainConfig validation as a task file (``trainteam.contract.stage_config``).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from pydantic import Field, ValidationError

from trainteam.agents.briefing import spent_minutes
from trainteam.contract.stage_config import StageOverrides, resolve_stage, with_overrides
from trainteam.contract.step_io import PlanFirstArgs, ToolContext
from trainteam.trainers.search.recipe_search import sec_per_step
from trainteam.workflows.steps.curate import planned_config
from trainteam.workflows.steps.recipe import searched_before
from trainteam.workflows.steps.retry import StopRetry, retraining_plan
from trainteam.workflows.steps.train import stage_progress
from trainteam.workflows.task.curriculum import curriculum_from_task
from trainteam.workflows.task.stage_plan import plan_stage


class TrainArgs(PlanFirstArgs):
    overrides: dict[str, StageOverrides] = Field(
        default_factory=dict, description="per-stage settings replacing the task's (from the planner), by stage name"
    )


def apply_overrides(ctx: ToolContext, args: TrainArgs) -> ToolContext:
    """The context with the task's stages changed as the engineer asked (a bad value: the model retries).
    Called only inside a persona's tool call, so pydantic-ai is loaded already (its import stays here:
    the step catalog, which ``workflows validate`` reads for tool names, stays light)."""
    from pydantic_ai import ModelRetry

    task = ctx.task
    for stage, ov in args.overrides.items():
        if stage not in task.stage_names():
            raise ModelRetry(f"overrides: stage {stage!r} is not in the task's stages {task.stage_names()}")
        try:
            task = with_overrides(task, stage, ov)
        except ValidationError as exc:
            raise ModelRetry(f"overrides.{stage}: {exc.errors()[0]['msg']}") from None
    return replace(ctx, task=task)


def plan_stages(ctx: ToolContext, tool: str) -> dict[str, Any]:
    """The run planner's verdict for each stage this tool would train (no torch): accounting,
    refusals, and the fixes that make a refused stage plan."""
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
        found = searched_before(ctx, stage)  # a search done on an earlier visit: its recipe, not the placeholders
        try:  # a retry follows the judge's diagnosis
            retry = retraining_plan(ctx, stage) if tool == "train" else None
        except StopRetry as stop:
            out["stages"][stage] = {"runnable": False, "refusals": [{"field": "retry", "reason": str(stop)}]}
            continue
        cfg = resolve_stage(task, stage, recipe=found.chosen if found is not None else None, retry=retry)
        verdict = plan_stage(task, stage, cfg)
        left = max(0.0, 1.0 - done_steps / cfg.max_steps)
        if found is not None and found.probes:  # the pace the probes measured on this machine, not the planner's guess
            verdict = verdict.model_copy(update={"est_minutes": round(cfg.max_steps * sec_per_step(found) / 60, 3)})
        total += verdict.est_minutes * left
        out["stages"][stage] = {
            "max_steps": cfg.max_steps,
            "learning_rate": cfg.learning_rate,
            "per_device_train_batch_size": cfg.per_device_train_batch_size,
            "max_length": cfg.max_length,
            "steps_done": done_steps,
            **verdict.model_dump(exclude={"stage"}),
        }
        searched = (task.search.stages or {}).get(stage)
        if searched:  # these settings are the search's to choose, within the budget: the numbers above are placeholders
            out["stages"][stage]["searched"] = {"settings": searched, "budget_fraction": task.search.budget_fraction}
    # a person approved spending over the budget for this step: the plan informs, it does not refuse
    out["budget_extended_by_person"] = ctx.decided.budget_extended
    out["est_minutes"] = round(total, 3)
    # the ceiling the run works under: the task's budget plus what a person granted since
    out["budget_minutes"] = round(ctx.allowed_s / 60, 3) if ctx.allowed_s is not None else task.budget.max_wall_minutes
    out["spent_minutes"] = round(spent_minutes(ctx) or 0.0, 3)  # what the run's earlier steps already took
    return out


def plan_curate(ctx: ToolContext, tool: str) -> dict[str, Any]:
    """What curate would run, with the filters it would apply, chosen for the kind of data."""
    return {**plan_step(ctx, tool), "config": planned_config(ctx).model_dump(mode="json")}


def plan_step(ctx: ToolContext, tool: str) -> dict[str, Any]:
    """What any other tool would run."""
    return {
        "tool": tool,
        "step": ctx.step,
        "inputs": {k: str(v) for k, v in ctx.inputs.given().items()},
        "will": f"run {tool} for step {ctx.step} of run {ctx.run_id}",
    }
