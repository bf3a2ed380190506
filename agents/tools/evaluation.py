"""eval_judge's tools: measure a checkpoint, then decide its gate from the numbers."""

from __future__ import annotations

from pathlib import Path

from trainteam.agents.tools.base import StepResult, ToolContext
from trainteam.graph import EdgeKind, NodeKind


def evaluate(ctx: ToolContext) -> StepResult:
    """Greedy exact match on the held-out problems, with the prompt format training used."""
    from trainteam.curation.demo import read_jsonl
    from trainteam.trainers import exact_match, load_tokenizer

    trained = ctx.output(ctx.inputs.get("of", "train"))
    data = ctx.output("prepare_corpus")
    ckpt = Path(trained["artifacts"]["checkpoint"])
    tokenizer = load_tokenizer(Path(trained["artifacts"]["tokenizer"]))
    problems = read_jsonl(Path(data["artifacts"]["eval"]))
    res = exact_match(ckpt, tokenizer, problems, max_new_tokens=ctx.task.eval.max_new_tokens,
                      batch_size=ctx.task.eval.batch_size)
    node = ctx.graph.link(
        NodeKind.EVAL, f"{ctx.run_id}/{ctx.step}#{ctx.visit}",
        [(EdgeKind.EVALUATES, trained["nodes"]["checkpoint"]), (EdgeKind.EVALUATED_ON, data["nodes"]["eval"]),
         (EdgeKind.PRODUCED_BY, ctx.step_node)],
        metrics={"exact_match": res.accuracy}, n=res.n, correct=res.correct,
    )
    stage = (trained.get("details") or {}).get("stages", ["?"])[-1]
    return StepResult(
        summary=f"exact match {res.accuracy:.1%} ({res.correct}/{res.n}) after {stage}",
        metrics={"exact_match": res.accuracy}, nodes={"eval": node, "checkpoint": trained["nodes"]["checkpoint"]},
        artifacts={"checkpoint": str(ckpt)},
        details={"stage": stage, "samples": res.samples[:5]},
    )


def gate(ctx: ToolContext) -> StepResult:
    """Pass or fail from the task's thresholds. A failed gate is never overridden here:
    only a person, through the approval queue, can accept one."""
    ev = ctx.output(ctx.inputs.get("of", "evaluate"))
    stage = ev["details"]["stage"]
    spec = ctx.task.gates.get(stage)
    reasons, passed = [], True
    if spec is None:
        reasons.append(f"no gate configured for stage {stage}: pass by default")
    else:
        value = ev["metrics"].get(spec.metric)
        if value is None:
            passed = False
            reasons.append(f"metric {spec.metric} was not measured")
        elif spec.min is not None and value < spec.min:
            passed = False
            reasons.append(f"{spec.metric} {value:.4f} < required {spec.min:.4f}")
        elif spec.min is not None:
            reasons.append(f"{spec.metric} {value:.4f} >= required {spec.min:.4f}")
    outcome = "passed" if passed else "failed"
    node = ctx.graph.link(NodeKind.GATE, f"{ctx.run_id}/{ctx.step}#{ctx.visit}",
                          [(EdgeKind.DECIDED_BY, ev["nodes"]["eval"]), (EdgeKind.PRODUCED_BY, ctx.step_node)],
                          stage=stage, outcome=outcome, reasons=reasons)
    return StepResult(outcome=outcome, summary=f"gate {outcome}: " + "; ".join(reasons),
                      nodes={"gate": node, "checkpoint": ev["nodes"]["checkpoint"]},
                      artifacts={"checkpoint": ev["artifacts"]["checkpoint"]},
                      details={"stage": stage, "reasons": reasons})
