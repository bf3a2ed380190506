"""Does the align stage earn its cost? The training engineer's choice to train DPO/GRPO or skip it.

An align stage learns from the model's own mistakes: GRPO's advantages are all zero when every
sampled answer is right (the demo's GRPO ran 200 steps on a model at 100 %, its loss flat at
-0.0012, its exact match unchanged), and DPO's pairs then come only from made-up wrong answers.
So when the stage before leaves at most ``task.align_min_headroom`` of the gate metric to gain
(``1 - exact match``), the stage is skipped, and a Decision node says why; a configured model may
choose otherwise (``agents.decisions``). A metric that is not a 0..1 score (held-out loss) always
leaves room: the stage runs.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from trainteam.agents.decisions import decide
from trainteam.contract.step_io import StepResult, ToolContext
from trainteam.contract.step_outputs import GateOutput
from trainteam.graph.record import record_decision
from trainteam.workflows.steps.judge import gate_rules

SCORES = ("exact_match", "accuracy", "format_adherence", "pass_rate", "reward")  # higher is better, at most 1


class AlignChoice(BaseModel):
    """Train the align stage, or skip it, and why."""

    run: bool = Field(description="true: train the align stage; false: skip it and keep the gated weights")
    reason: str = Field(default="", max_length=500)


def _measured(ctx: ToolContext, stage: str, start: StepResult) -> tuple[str, float | None]:
    rules = gate_rules(ctx.task, stage)
    metric = rules[0].metric if rules else "exact_match"
    value = GateOutput.of(start).judged.get(metric)
    return metric, float(value) if isinstance(value, (int, float)) else None


def offline_choice(ctx: ToolContext, stage: str, start: StepResult) -> AlignChoice:
    """The offline policy's choice from the metric the previous gate judged."""
    metric, value = _measured(ctx, stage, start)
    floor = ctx.task.align_min_headroom
    before = start.stage or "the stage before"
    if value is None or metric not in SCORES:
        return AlignChoice(run=True, reason=f"{metric} is not a 0..1 score the gate judged: {stage} runs")
    headroom = 1.0 - value
    if headroom <= floor:
        return AlignChoice(
            run=False,
            reason=f"{before} left {metric} {value:.3f}: headroom {headroom:.3f} ≤ "
            f"{floor:g} (align_min_headroom), nothing for {stage} to gain",
        )
    return AlignChoice(run=True, reason=f"{before} left {metric} {value:.3f}: headroom {headroom:.3f} > {floor:g}")


def skip_align(ctx: ToolContext, stage: str, start: StepResult) -> StepResult | None:
    """The skipped step's result when the engineer skips ``stage``; None when it trains."""
    offline = offline_choice(ctx, stage, start)
    decided = decide(
        "training_engineer",
        f"Train the align stage {stage}, or skip it",
        {"stage": stage, "judged": GateOutput.of(start).judged, "align_min_headroom": ctx.task.align_min_headroom},
        offline,
    )
    choice = decided.value
    node = record_decision(
        ctx.graph,
        run_id=ctx.run_id,
        segment=f"{ctx.step}#{ctx.visit}/align_choice",
        step_node=ctx.step_node,
        facts={
            "decision": "run" if choice.run else "skip",
            "stage": stage,
            "reason": choice.reason,
            **decided.evidence(),
        },
    )
    if choice.run:
        return None
    return StepResult(
        outcome="skipped",
        summary=f"{stage} skipped: {choice.reason}",
        artifacts=dict(start.artifacts),
        nodes={"checkpoint": start.checkpoint_node, "decision": node},
        details={"stages": [stage], "choice": choice.model_dump(), **decided.evidence()},
    )
