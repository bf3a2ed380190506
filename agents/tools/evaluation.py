"""eval_judge's tools: measure a checkpoint with its stage's battery, then decide its gate."""

from __future__ import annotations

import json
from pathlib import Path

from trainteam.agents.tools.base import StepResult, ToolContext
from trainteam.graph import EdgeKind


def _decontamination_report(ctx: ToolContext) -> dict | None:
    """The data engine's report for the eval set, when curation ran: the battery attaches it
    instead of checking the eval set against the training data a second time."""
    cur = ctx.outputs.get("curate")
    if not cur or cur.get("outcome") != "ok":
        return None
    report = json.loads(Path(cur["artifacts"]["report"]).read_text())
    leaked = report.get("leaked_eval_examples", {}).get("eval", [])
    return {"checked": True, "source": "curation", "version": report.get("version"),
            "removed": 0, "leaked_in_training_and_removed_there": leaked}


def evaluate(ctx: ToolContext) -> StepResult:
    """The stage's eval battery (held-out loss, greedy exact match, reliability checks)
    on the checkpoint of the step named in ``inputs.of``."""
    from trainteam.curation.demo import read_jsonl
    from trainteam.trainers import load_tokenizer
    from trainteam.trainers.eval_battery import record_battery, run_battery

    trained = ctx.output(ctx.inputs.get("of", "train"))
    data = ctx.output("prepare_corpus")
    stage = (ctx.inputs.get("stage") or (trained.get("details") or {}).get("stages", [None])[-1]
             or ctx.task.stages[-1])
    ckpt = Path(trained["artifacts"]["checkpoint"])
    tokenizer = load_tokenizer(Path(trained["artifacts"]["tokenizer"]))
    problems = read_jsonl(Path(data["artifacts"]["eval"]))
    battery = ctx.inputs.get("battery")
    from trainteam.trainers.eval_battery import BatterySpec, default_battery

    spec = BatterySpec.model_validate(battery) if battery else default_battery(stage)
    spec = spec.model_copy(update={"max_new_tokens": ctx.task.eval.max_new_tokens,
                                   "batch_size": ctx.task.eval.batch_size})
    decon = _decontamination_report(ctx)
    train_records = None if decon else read_jsonl(Path(ctx.latest("prepare_corpus", "curate")["artifacts"]["train"]))
    result = run_battery(ckpt, tokenizer, problems, stage=stage, spec=spec, train_records=train_records,
                         decontamination_report=decon)
    node = record_battery(ctx.graph, result, run_id=ctx.run_id, key=f"{ctx.run_id}/{ctx.step}#{ctx.visit}",
                          checkpoint_node=trained["nodes"]["checkpoint"], dataset_node=data["nodes"]["eval"])
    ctx.graph.add_edge(node, ctx.step_node, EdgeKind.PRODUCED_BY)
    m = result.metrics
    shown = ", ".join(f"{k} {v:.3g}" for k, v in m.items() if k in ("exact_match", "heldout_loss", "format_adherence"))
    return StepResult(
        summary=f"{stage}: {shown} on {result.n_eval} held-out problems",
        metrics=m, nodes={"eval": node, "checkpoint": trained["nodes"]["checkpoint"]},
        artifacts={"checkpoint": str(ckpt), "tokenizer": trained["artifacts"]["tokenizer"]},
        details={"stages": [stage], "stage": stage, "samples": result.details.get("exact_match", {}).get("samples", [])[:5],
                 "decontamination": result.decontamination},
    )


def _previous_eval(ctx: ToolContext, this_eval_step: str) -> tuple[str | None, dict | None]:
    """The metrics of the eval before this one (for "no regression" rules)."""
    evals = [(name, out) for name, out in ctx.outputs.items()
             if name != this_eval_step and out.get("outcome") == "ok"
             and str((out.get("nodes") or {}).get("eval", "")).startswith("Eval:")]
    if not evals:
        return None, None
    name, out = evals[-1]
    return out["details"]["stage"], out["metrics"]


def gate(ctx: ToolContext) -> StepResult:
    """Pass or fail from the task's thresholds (absolute, and no regression against the
    previous stage). Never overridden by an agent: a failed gate is promoted only with a
    person's approved decision, which the engine reads from the approval queue and passes
    in as ``inputs.accepted``."""
    from trainteam.trainers.gates import GateDecision, accept_failed_gate, evaluate_gate, record_gate

    ev_step = ctx.inputs.get("of", "evaluate")
    ev = ctx.output(ev_step)
    stage = ev["details"]["stage"]
    rules = ctx.task.gates.get(stage)
    prev_stage, prev_metrics = _previous_eval(ctx, ev_step)
    if rules is None:  # the task set no bar for this stage: promoted, and the report says so
        decision = GateDecision(stage=stage, passed=True, checks=[], previous_stage=prev_stage,
                                reasons=[f"no gate rules for stage {stage} in the task"])
    else:
        decision = evaluate_gate(stage, ev["metrics"], rules, previous=prev_metrics, previous_stage=prev_stage)
    accepted = ctx.inputs.get("accepted")
    if accepted is not None:
        decision = accept_failed_gate(decision, accepted)
    node = record_gate(ctx.graph, decision, run_id=ctx.run_id, eval_node=ev["nodes"]["eval"])
    ctx.graph.add_edge(node, ctx.step_node, EdgeKind.PRODUCED_BY)
    return StepResult(outcome="passed" if decision.promote else "failed", summary=decision.summary,
                      nodes={"gate": node, "checkpoint": ev["nodes"]["checkpoint"]},
                      artifacts={"checkpoint": ev["artifacts"]["checkpoint"], "tokenizer": ev["artifacts"]["tokenizer"]},
                      details={"stage": stage, "reasons": decision.reasons, "passed": decision.passed,
                               "accepted_by": decision.accepted_by})
