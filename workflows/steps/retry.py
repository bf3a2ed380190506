"""A retry after a failed gate trains with the judge's plan, not "twice as long".

The gate step diagnoses a failure (``trainers.diagnosis``) and stores the diagnosis, with its
bounded retry plan, in its output (``details["diagnosis"]``). When the workflow loops back to the
training step (visit > 1), ``retraining_plan`` hands that plan for the stage the gate judged to the
stage-config resolver (``trainteam.contract.stage_config.resolve_stage``): the plan's new values for
``max_steps`` / ``num_train_epochs`` / ``learning_rate`` / ``warmup_steps`` replace the stage's, and a
plan that does not retrain (``stop``, ``more_data``) raises ``StopRetry`` with its reason. Other stages,
and visit 1, have no plan.
"""

from __future__ import annotations

from trainteam.contract.step_io import StepResult, ToolContext
from trainteam.contract.step_outputs import GateOutput
from trainteam.trainers.evaluation.diagnosis import Diagnosis, RetryPlan


class StopRetry(Exception):
    """The failed gate's plan says a retry cannot help (or there is no plan to retry with)."""

    def __init__(self, reason: str, plan: RetryPlan | None = None):
        super().__init__(reason)
        self.reason, self.plan = reason, plan


def failed_gate(ctx: ToolContext, stage: str) -> tuple[str, StepResult] | None:
    """The latest failed gate output that judged ``stage`` (its step name and output), or None."""
    found = None
    for name, out in ctx.outputs.items():
        if out.outcome == "failed" and out.stage == stage and GateOutput.written_by(out):
            found = (name, out)
    return found


def gate_diagnosis(out: StepResult) -> Diagnosis | None:
    """The diagnosis a gate output carries (None: it has none)."""
    raw = GateOutput.of(out).diagnosis
    return None if raw is None else Diagnosis.model_validate(raw)


def retry_plan(ctx: ToolContext, stage: str) -> RetryPlan | None:
    """The plan this visit of the training step follows for ``stage``: None on visit 1 and for a
    stage no failed gate judged; ``StopRetry`` when the gate failed with no diagnosis to follow."""
    if ctx.visit <= 1:
        return None
    found = failed_gate(ctx, stage)
    if found is None:
        return None
    name, out = found
    diagnosis = gate_diagnosis(out)
    if diagnosis is None:
        raise StopRetry(f"{name} failed {stage} without a diagnosis: no plan to retry with ({out.summary})")
    return diagnosis.plan


def retraining_plan(ctx: ToolContext, stage: str) -> RetryPlan | None:
    """The failed gate's plan for ``stage`` on a retry visit (the resolver applies it); None on visit 1 and
    for stages the gate did not judge. ``StopRetry`` when the plan does not retrain."""
    plan = retry_plan(ctx, stage)
    if plan is not None and not plan.retrains:
        raise StopRetry(retry_note(ctx, stage) or plan.reason, plan)
    return plan


def retry_note(ctx: ToolContext, stage: str) -> str | None:
    """What the train step's summary says of a retry's changed plan for ``stage`` (None: not a retry)."""
    try:
        plan = retry_plan(ctx, stage)
    except StopRetry as stop:
        return stop.reason
    if plan is None:
        return None
    if not plan.retrains:
        return f"{stage}: no retry ({plan.action.replace('_', ' ')}): {plan.reason}"
    found = failed_gate(ctx, stage)
    diagnosis = gate_diagnosis(found[1]) if found else None
    kind = diagnosis.kind.replace("_", "-") if diagnosis else "failed gate"
    return f"{stage} retried after {kind}: {plan.line()}"
