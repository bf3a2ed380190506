"""eval_judge's tools: measure a checkpoint with its stage's battery, then decide its gate."""

from __future__ import annotations

import json
from pathlib import Path

from trainteam.agents.decisions import decide
from trainteam.contract.stage_config import resolve_stage
from trainteam.contract.step_io import Decision, GateFacts, StepResult, ToolContext
from trainteam.contract.step_outputs import EvalOutput, GateOutput, TrainOutput
from trainteam.contract.train_task import CurriculumStage
from trainteam.curation.demo import read_jsonl
from trainteam.graph.record import record_diagnosis, record_eval, record_gate
from trainteam.trainers.evaluation.answer_style import AnswerStyle, answer_style
from trainteam.trainers.evaluation.battery import BatterySpec, default_battery, run_battery
from trainteam.trainers.evaluation.diagnosis import (
    Attempt,
    Diagnosis,
    GateEvidence,
    ProbePoint,
    blind,
    check_diagnosis,
    diagnose,
)
from trainteam.trainers.evaluation.gates import GateDecision, GateRule, accept_failed_gate, evaluate_gate
from trainteam.trainers.evaluation.metrics.metric_registry import METRICS
from trainteam.trainers.evaluation.stage_gate import StageInput, judge_stage
from trainteam.trainers.search.recipe_search import Recipe
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.tokenizer import load_tokenizer
from trainteam.workflows.steps.corpus import stage_eval_set, stage_train_data
from trainteam.workflows.steps.eval_length import eval_budget
from trainteam.workflows.steps.retry import gate_diagnosis
from trainteam.workflows.task.curriculum import curriculum_from_task, eval_settings
from trainteam.workflows.task.stage_plan import plan_stage


def _decontamination_report(ctx: ToolContext, eval_set: str = "eval") -> dict | None:
    """The data engine's report for this eval set, when curation ran: the battery attaches it
    instead of checking the eval set against the training data a second time. Curation
    checked every training set of the run (the task's and each stage's own) against every
    eval set, so the reports together cover whatever a checkpoint trained on."""
    cur = ctx.outputs.get("curate")
    if cur is None or cur.outcome != "ok":
        return None
    versions, leaked = [], []
    for name, path in sorted(cur.artifacts.items()):
        if name == "report" or name.endswith(".report"):
            report = json.loads(Path(path).read_text())
            versions.append(report.get("version"))
            leaked += report.get("leaked_eval_examples", {}).get(eval_set, [])
    return {
        "checked": True,
        "source": "curation",
        "version": versions[0] if len(versions) == 1 else versions,
        "removed": 0,
        "leaked_in_training_and_removed_there": leaked,
    }


def measure_stage(
    ctx: ToolContext,
    stage,
    ckpt: Path,
    tokenizer_dir: Path,
    ckpt_node: str | None,
    key: str,
    trained_on: list[Path],
    battery: BatterySpec | None = None,
    eval_set: tuple[str, Path, str] | None = None,
):
    """A curriculum stage's battery on its checkpoint, on the stage's eval set (or ``eval_set``: name, file,
    DatasetVersion node), recorded as an Eval node (``key``). Returns (node, BatteryResult). Without a
    curation report, the eval set is first checked against ``trained_on`` (every file the checkpoint
    trained on)."""
    set_name, eval_path, eval_node = eval_set or stage_eval_set(ctx, stage)
    tokenizer = load_tokenizer(tokenizer_dir)
    spec = battery.model_copy(update=eval_settings(ctx.task)) if battery is not None else stage.battery
    length = eval_budget(ctx, stage, tokenizer)  # sized from the held-out answers, or the task's checked length
    spec = spec.model_copy(update={"max_new_tokens": length.tokens})
    decon = _decontamination_report(ctx, set_name)
    train_records = None if decon else [r for p in dict.fromkeys(trained_on) for r in read_jsonl(p)]
    # The battery's kind decides its defaults; the result carries the stage's own name.
    # lm-eval-harness writes its task files and results beside the run's reports
    out_dir = ctx.ws.dir("reports") / ctx.run_id / "evals" / key.split("/", 1)[-1].replace("#", "-")
    result = run_battery(
        ckpt,
        tokenizer,
        read_jsonl(eval_path),
        stage=stage.kind,
        spec=spec,
        train_records=train_records,
        decontamination_report=decon,
        out_dir=out_dir if "lm_eval" in spec.metrics else None,
        answer=ctx.task.answer,
    )
    result = result.model_copy(update={"stage": stage.name, "generation": length})
    node = record_eval(
        ctx.graph,
        key,
        run_id=ctx.run_id,
        stage=result.stage,
        stage_kind=result.kind,
        metrics=result.metrics,
        n_eval=result.n_eval,
        decontamination=result.decontamination,
        checkpoint_node=ckpt_node,
        dataset_node=eval_node,
        produced_by=ctx.step_node,
    )
    return node, result


def stage_style(ctx: ToolContext, stage) -> AnswerStyle:
    """The style of a stage's held-out answers (exact or free-form) and the metrics that judge them: read off
    its eval set's references, the same rows its battery scores (``answer_style``)."""
    _, eval_path, _ = stage_eval_set(ctx, stage)
    return answer_style(read_jsonl(eval_path), ctx.task.answer, ctx.task.eval.metrics)


def stage_of(ctx: ToolContext, name: str):
    """The filled-in curriculum stage ``name``; a stage the task does not list (an ad-hoc
    ``inputs.stage``) gets its kind's default battery on the task's data."""
    found = curriculum_from_task(ctx.task).find(name)
    if found is not None:
        return found
    return CurriculumStage(name=name, battery=default_battery(name).model_copy(update=eval_settings(ctx.task)))


def evaluate(ctx: ToolContext) -> StepResult:
    """The stage's eval battery (held-out loss, greedy exact match, reliability checks)
    on the checkpoint of the step named in ``inputs.of``: the last stage that step trained
    (the train step measured the curriculum's earlier stages itself), with that stage's
    battery on that stage's eval set."""
    trained = ctx.output(ctx.inputs.of or "train")
    stage = stage_of(
        ctx,
        ctx.inputs.stage
        or (trained.stages[-1] if trained.stages else None)
        or curriculum_from_task(ctx.task).names()[-1],
    )
    ckpt = trained.checkpoint
    trained_on = [Path(p) for p in TrainOutput.of(trained).trained_on]
    if not trained_on:
        trained_on = [stage_train_data(ctx, stage)[0]]
    same = _measured_before(ctx, trained.checkpoint_node, stage.name)
    if same is not None and ctx.inputs.battery is None:
        name, out = same  # the very weights (same content hash) on the same battery: measured once
        return StepResult(
            summary=f"{stage.name}: the weights {name} measured (same checkpoint "
            f"{trained.checkpoint_node}): {out.summary.split(': ', 1)[-1]}",
            metrics=dict(out.metrics),
            nodes={"eval": out.node("eval"), "checkpoint": trained.checkpoint_node},
            artifacts={"checkpoint": str(ckpt), "tokenizer": trained.artifacts["tokenizer"]},
            details=EvalOutput.of(out)
            .model_copy(update={"measured_by": name})
            .model_dump(mode="json", exclude_unset=True),
        )
    node, result = measure_stage(
        ctx,
        stage,
        ckpt,
        trained.tokenizer,
        trained.checkpoint_node,
        f"{ctx.run_id}/{ctx.step}#{ctx.visit}",
        trained_on,
        battery=ctx.inputs.battery,
    )
    m = result.metrics
    base = base_input(ctx)
    output = EvalOutput(
        stages=[stage.name],
        stage=stage.name,
        n_eval=result.n_eval,
        samples=result.samples[:5],
        answers=result.answer_style,
        misses=result.misses,
        generation=result.generation,
        precision=result.precision,
        base=base,
        decontamination=result.decontamination,
    )
    return StepResult(
        summary=f"{stage.name}: {scores_beside(m, base)} on {result.n_eval} held-out problems "
        f"(answers up to {result.answer_tokens} new tokens, scored in "
        f"{result.precision}){_judged_by(result.answer_style)}",
        metrics=m,
        nodes={"eval": node, "checkpoint": trained.checkpoint_node},
        artifacts={"checkpoint": str(ckpt), "tokenizer": trained.artifacts["tokenizer"]},
        details=output.model_dump(mode="json", exclude_unset=True),
    )


def _judged_by(style: dict | None) -> str:
    """``; free-form answers, judged by heldout_loss, rouge_l, ...``: what the gate will read, from the battery."""
    if not style or style.get("kind") == "text":
        return ""
    kind = "free-form" if style["kind"] == "free_form" else style["kind"]
    return f"; {kind} answers, judged by {', '.join(style['judged_by'])}"


SHOWN = ("exact_match", "rouge_l", "chrf", "form_rate", "format_adherence", "heldout_loss")


def scores_beside(metrics: dict, base: StageInput | None) -> str:
    """``exact_match 0.95 (base 0.0167), heldout_loss 0.21 (base 2.3)``: each score beside the base model's."""
    parts = []
    for k in SHOWN:
        if k in metrics:
            ref = f" ({base.name} {base.shown(k)})" if base is not None and k in base.metrics else ""
            parts.append(f"{k} {metrics[k]:.3g}{ref}")
    return ", ".join(parts)


def base_input(ctx: ToolContext) -> StageInput | None:
    """What the run's first stage started from, as the train step measured it (``details.base``)."""
    train = ctx.outputs.get("train")
    return TrainOutput.of(train).base if train is not None else None


def _is_eval(out: StepResult) -> bool:
    """An eval step's result: it measured a checkpoint (an ``Eval:`` node)."""
    return out.outcome == "ok" and out.nodes.get("eval", "").startswith("Eval:")


def _measured_before(ctx: ToolContext, checkpoint_node: str, stage: str) -> tuple[str, StepResult] | None:
    """An earlier eval step of this run that measured the same checkpoint node for the same stage."""
    for name, out in ctx.outputs.items():
        if _is_eval(out) and out.nodes.get("checkpoint") == checkpoint_node and out.stage == stage:
            return name, out
    return None


def stage_input(ctx: ToolContext, this_eval_step: str, stage: str) -> StageInput | None:
    """What the judged stage started from (for "no regression" rules and the default gate): the last
    other eval step (an align stage's input), else what the train step measured as the stage's input
    (on the stage's own held-out set), else the base model."""
    train = ctx.outputs.get("train")
    inputs = TrainOutput.of(train).inputs if train is not None else {}
    if stage in inputs:
        return inputs[stage]
    evals = [out for name, out in ctx.outputs.items() if name != this_eval_step and _is_eval(out)]
    if evals:
        out = evals[-1]
        return StageInput(name=out.stage or "", metrics=out.metrics)
    return base_input(ctx)


def judge_gate(
    ctx: ToolContext, stage: str, metrics: dict, rules: list, before: StageInput | None, n_eval: int | None
) -> GateDecision:
    """The stage's gate (``trainers/evaluation/stage_gate.py``): the task's rules or the default, against what the
    stage started from, with the measurement checks. Without anything to compare against (a stage
    outside the task's list) only the task's rules judge; with none either, the gate cannot pass."""
    st = stage_of(ctx, stage)
    if before is None:
        if not rules:
            return GateDecision(
                stage=stage,
                passed=False,
                checks=[],
                reasons=[
                    f"no gate rules for stage {stage} and nothing it started from to compare "
                    "with: a gate never passes on nothing"
                ],
            )
        return evaluate_gate(stage, metrics, rules)
    return judge_stage(stage, st.kind, st.method, metrics, rules, before, n_eval, style=stage_style(ctx, st))


def gate_rules(task, stage: str) -> list:
    """The gate rules of a stage: the curriculum stage's, or the plain task's ``gates``."""
    found = curriculum_from_task(task).find(stage)
    return list(found.gates) if found is not None else []


def gate_facts(ctx: ToolContext) -> GateFacts | None:
    """The bar the judge's offline policy re-derives the gate from: the first ``min`` rule of the
    evaluated stage, with what was measured. None once a person accepted the failed gate (their
    decision, which the judge does not second-guess) or when no rule sets a minimum."""
    if ctx.decided.accepted_gate is not None:
        return None
    try:
        ev = ctx.output(ctx.inputs.of or "evaluate")
    except LookupError:
        return None
    rule = next((r for r in gate_rules(ctx.task, ev.stage or "") if r.min is not None), None)
    return None if rule is None else GateFacts(rule.metric, rule.min, dict(ev.metrics))


def settle_gate(
    ctx: ToolContext, decision: GateDecision, accepted: Decision | None, eval_node: str | None
) -> tuple[GateDecision, str]:
    """A gate's decision with a person's acceptance of its failure applied, recorded as its Gate node (which
    evaluates the Eval node and is produced by this step): the decision and the node's id."""
    if accepted is not None:
        decision = accept_failed_gate(decision, accepted.model_dump())
    node = record_gate(
        ctx.graph,
        run_id=ctx.run_id,
        stage=decision.stage,
        passed=decision.passed,
        promote=decision.promote,
        reasons=decision.reasons,
        accepted_by=decision.accepted_by,
        approval_id=decision.approval_id,
        eval_node=eval_node,
        produced_by=ctx.step_node,
    )
    return decision, node


def gate(ctx: ToolContext) -> StepResult:
    """Pass or fail from the task's thresholds (absolute, and no regression against the
    previous stage). Never overridden by an agent: a failed gate is promoted only with a
    person's approved decision, which the engine reads from the approval queue and passes
    in as ``decided.accepted_gate``."""
    ev_step = ctx.inputs.of or "evaluate"
    ev = ctx.output(ev_step)
    measured = EvalOutput.of(ev)
    stage = ev.stage or ""
    if ctx.inputs.final:
        decision = _final_decision(ctx, ev)
    else:
        decision = judge_gate(
            ctx,
            stage,
            ev.metrics,
            gate_rules(ctx.task, stage),
            stage_input(ctx, ev_step, stage),
            measured.n_eval,
        )
    decision, node = settle_gate(ctx, decision, ctx.decided.accepted_gate, ev.node("eval"))
    output = GateOutput(
        stage=decision.stage,
        reasons=decision.reasons,
        passed=decision.passed,
        accepted_by=decision.accepted_by,
        judged=ev.metrics,
        checked=sorted({c.metric for c in decision.checks}),
    )
    summary, nodes = decision.summary, {"gate": node, "checkpoint": ev.checkpoint_node}
    diagnosis = None if decision.promote or ctx.inputs.final else diagnose_gate(ctx, ev, decision)
    if diagnosis is not None:
        output.diagnosis = d = diagnosis.model_dump(mode="json")
        summary = f"{summary}; {diagnosis.line()}"
        nodes["diagnosis"] = record_diagnosis(
            ctx.graph,
            run_id=ctx.run_id,
            step_node=ctx.step_node,
            gate_node=node,
            stage=decision.stage,
            cause=d["kind"],
            summary=d["summary"],
            plan=d["plan"],
            evidence=d["evidence"],
            decided_by=d["decided_by"],
        )
    return StepResult(
        outcome="passed" if decision.promote else "failed",
        summary=summary,
        nodes=nodes,
        artifacts={"checkpoint": ev.artifacts["checkpoint"], "tokenizer": ev.artifacts["tokenizer"]},
        details=output.model_dump(mode="json", exclude_unset=True),
    )


DIAGNOSE = (
    "The gate of stage {stage} failed ({reasons}). Say why, from the evidence: kind under_fit, over_fit, "
    "instability, data or ceiling, and the retry plan that follows (more_steps, lower_lr, higher_lr, "
    "fewer_steps, more_data or stop; changes: the stage's new max_steps / num_train_epochs / learning_rate). "
    "Bounds: the learning rate within 0.1x-10x of {lr:g}, at most 4x the {steps} steps and what the budget "
    "left allows; data and ceiling causes do not retrain."
)


def diagnose_gate(ctx: ToolContext, ev: StepResult, decision: GateDecision) -> Diagnosis | None:
    """Why the gate failed and the bounded retry plan: the offline judge's diagnosis from the
    evidence, or the judge's configured model's (``agents.decisions.decide``), checked against the
    same bounds; the measured numbers are always the evidence's. None when the judged checkpoint's
    training is not among the run's outputs."""
    evidence = gate_evidence(ctx, ev, decision)
    if evidence is None:
        return None
    blind_check = next((c for c in decision.checks if c.kind == "measurement" and not c.passed), None)
    if blind_check is not None:  # the gate's own finding: no model is asked to explain a blind metric away
        return blind(evidence, blind_check.reason)
    return judge_diagnosis(evidence, decision.reasons)


def judge_diagnosis(evidence: GateEvidence, reasons: list[str], environ: dict[str, str] | None = None) -> Diagnosis:
    """The offline diagnosis, or the configured model's within ``check_diagnosis``'s bounds (a
    refused or malformed answer keeps the offline one, with the warning); either way the numbers
    it records are the ones measured."""
    offline = diagnose(evidence)
    question = DIAGNOSE.format(
        stage=evidence.stage, reasons="; ".join(reasons), lr=evidence.learning_rate, steps=evidence.max_steps
    )
    decided = decide(
        "eval_judge", question, evidence, offline, check=lambda d: check_diagnosis(d, evidence), environ=environ
    )
    return decided.value.model_copy(
        update={"evidence": offline.evidence, "decided_by": decided.by, "warning": decided.warning}
    )


def _trained(ctx: ToolContext, ev: StepResult, stage: str) -> StepResult | None:
    """The training step output that made the judged checkpoint (its curve holds ``stage``)."""
    ckpt = ev.nodes.get("checkpoint")
    for out in reversed(list(ctx.outputs.values())):
        if out.nodes.get("checkpoint") == ckpt and stage in TrainOutput.of(out).losses:
            return out
    return None


def gate_evidence(ctx: ToolContext, ev: StepResult, decision: GateDecision) -> GateEvidence | None:
    """What the run measured for the gated stage, as typed numbers for the diagnosis."""
    stage = decision.stage
    trained = _trained(ctx, ev, stage)
    if trained is None:
        return None
    record, metrics = TrainOutput.of(trained), trained.metrics
    cfg = _attempt_config(ctx, stage, record)
    failed = next((c for c in decision.checks if not c.passed), None)
    steps = int(metrics.get(f"{stage}.steps", cfg.max_steps))
    return GateEvidence(
        stage=stage,
        method=cfg.method,
        metric=failed.metric if failed else "exact_match",
        value=failed.value if failed else None,
        bar=failed.threshold if failed else None,
        losses=[(int(x), y) for x, y in record.losses[stage]],
        heldout_loss=ev.metrics.get("heldout_loss"),
        earlier=_earlier(ctx, stage),
        steps=steps,
        max_steps=int(metrics.get(f"{stage}.max_steps", cfg.max_steps)),
        num_train_epochs=cfg.num_train_epochs,
        learning_rate=cfg.learning_rate,
        warmup_steps=cfg.warmup_steps,
        batch_rows=cfg.per_device_train_batch_size
        * cfg.gradient_accumulation_steps
        * cfg.devices_per_node
        * cfg.num_nodes,
        spikes=record.spikes_in(stage),
        probes=search_probes(record, stage),
        **_data_evidence(ctx, ev, stage, trained),
        **_cost(ctx, stage, trained),
    )


def _attempt_config(ctx: ToolContext, stage: str, record: TrainOutput) -> TrainConfig:
    """The config the judged attempt trained with: the train step's record of it (the resolved config,
    ``trainteam.contract.stage_config``), or for a run recorded before the step kept the whole config, the
    resolver's on the task, the recipe search's choice and on a retry the plan this visit followed."""
    resolved = record.config(stage)
    if resolved is not None:
        return resolved
    chosen = record.chosen(stage)
    before = ctx.outputs.get(ctx.step) if ctx.visit > 1 else None
    plan = diagnosis.plan if before and (diagnosis := gate_diagnosis(before)) else None
    return resolve_stage(
        ctx.task,
        stage,
        recipe=Recipe.model_validate(chosen) if chosen else None,
        retry=plan if plan is not None and plan.stage == stage and plan.retrains else None,
    )


def _earlier(ctx: ToolContext, stage: str) -> list[Attempt]:
    """This gate's attempt before the retry (its diagnosis kept the numbers it read)."""
    before = ctx.outputs.get(ctx.step) if ctx.visit > 1 else None
    diagnosis = gate_diagnosis(before) if before else None
    if before is None or diagnosis is None or diagnosis.plan.stage != stage:
        return []
    m = diagnosis.evidence
    read = GateOutput.of(before)
    value = read.judged.get(read.checked[0]) if read.checked else None
    return [
        Attempt(
            steps=m.steps,
            learning_rate=m.learning_rate,
            heldout_loss=m.heldout_loss,
            final_loss=m.final_loss,
            value=value,
        )
    ]


def search_probes(record: TrainOutput, stage: str) -> list[ProbePoint]:
    """The recipe search's probes of ``stage`` as the train step recorded them."""
    return [
        ProbePoint(
            learning_rate=p["learning_rate"],
            steps=p.get("steps", 0),
            values={int(k): v for k, v in (p.get("values") or {}).items()},
            pruned=bool(p.get("pruned")),
            unstable=bool(p.get("unstable")),
        )
        for p in record.probes(stage)
    ]


def _data_evidence(ctx: ToolContext, ev: StepResult, stage: str, trained: StepResult) -> dict:
    """Rows trained on, what curation removed from them, and eval problems found in training data."""
    out: dict = {}
    try:
        path, node = stage_train_data(ctx, stage_of(ctx, stage))
    except LookupError:  # no corpus step in this run's outputs: the diagnosis goes without row counts
        path, node = None, None
    if path is not None and path.is_file():
        with open(path, "rb") as fh:
            out["n_train"] = sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 20), b""))
    cur = ctx.outputs.get("curate")
    if node is not None and cur is not None and cur.outcome == "ok" and cur.nodes.get("train") == node:
        cm = cur.metrics
        out.update(rows_in=int(cm.get("curation.input", 0)) or None, rows_out=int(cm.get("curation.output", 0)))
    out["max_drop_fraction"] = (ctx.task.curation or {}).get("max_drop_fraction", 0.5)
    decon = EvalOutput.of(ev).decontamination or {}
    leaked = decon.get("leaked_in_training_and_removed_there")
    out["leaks"] = len(leaked) if isinstance(leaked, list) else int(decon.get("removed") or 0)
    node_facts = ctx.graph.get_node(ev.node("eval")) if ctx.graph.has_node(ev.node("eval")) else {}
    n_eval = decon.get("eval_examples") or node_facts.get("n_eval")
    out["n_eval"] = int(n_eval) if n_eval else None
    return out


def _cost(ctx: ToolContext, stage: str, trained: StepResult) -> dict:
    """The attempt's pace and what a retry spends besides, against the budget the run has left
    after the estimate of the stages still to come (the planner's)."""
    metrics, names = trained.metrics, trained.stages or [stage]
    steps = metrics.get(f"{stage}.steps_this_attempt") or metrics.get(f"{stage}.steps")
    wall = metrics.get(f"{stage}.wall_s")
    out: dict = {
        "seconds_per_step": wall / steps if wall and steps else None,
        "fixed_s": sum(metrics.get(f"{n}.wall_s", 0.0) for n in names if n != stage),
    }
    if ctx.allowed_s is not None and ctx.spent_s is not None:
        order = [s.name for s in curriculum_from_task(ctx.task).stages]
        later = order[order.index(stage) + 1 :] if stage in order else []
        reserve = sum(plan_stage(ctx.task, s, ctx.task.train_config(s)).est_minutes * 60 for s in later)
        out["budget_left_s"] = max(0.0, ctx.allowed_s - ctx.spent_s - reserve)
    return out


def _final_decision(ctx: ToolContext, ev: StepResult):
    """The weights ``register_model`` will register against the last gate that promoted a
    checkpoint: every metric that gate checked may fall by at most ``task.final_tolerance``."""
    passed = [(n, o) for n, o in ctx.outputs.items() if o.outcome == "passed" and GateOutput.written_by(o)]
    if not passed:
        return GateDecision(
            stage="final", passed=True, checks=[], reasons=["no earlier gate to hold the final weights to"]
        )
    name, last = passed[-1]
    held = GateOutput.of(last)
    judged = held.judged
    metrics = held.checked or [m for m in ("exact_match",) if m in judged and m in ev.metrics]
    if not metrics:
        return GateDecision(
            stage="final", passed=True, checks=[], reasons=[f"{name} checked no metric that final_eval measured"]
        )
    n_eval = EvalOutput.of(ev).n_eval
    rules = [
        GateRule(metric=m, max_regression=final_tolerance(ctx.task.final_tolerance, m, judged, n_eval)) for m in metrics
    ]
    return evaluate_gate("final", ev.metrics, rules, previous=judged, previous_stage=f"{name} ({last.stage})")


def final_tolerance(task_tolerance: float, metric: str, judged: dict, n_eval: int | None = None) -> float:
    """How far ``metric`` may fall from the gate that passed to the merged weights: the task's tolerance, or for a
    loss or a score of free-form answers (ROUGE-L, chrF, the form rate) at least its noise band: merging folds the
    adapter into the weights in another float order, which moves a loss in its fourth digit and may turn one
    greedy token of a long answer (a short exact answer keeps the task's tolerance, 0 by default)."""
    spec = METRICS.get(metric)
    if spec is None or metric not in judged or (spec.noise != "loss" and spec.judges != "free_form"):
        return task_tolerance
    return max(task_tolerance, spec.band(float(judged[metric]), n_eval, judged.get(f"{metric}_se")))
