"""The training engineer's recipe search inside the train step: before a stage the task left
without a recipe trains (``task.search.stages``), the budget (or the task) sets its length and
probes at that length pick its learning rate; the chosen probe's checkpoint at the top rung is
where the stage's run resumes (``StageRecipe.warm_start``), on the same rows (the training rows
less the validation slice). The probes are Probe nodes and the choice a Decision node in the graph.

The search's share of the run's time is ``search.budget_fraction`` of the budget, split evenly
over the searched stages; each searched stage's length comes from the time left after the
search, shared with the stages still to train (their planner estimates reserved) and 15 % kept
for evaluation, merging and registering. A search done once is read back from its Decision node
(a crash, a person's answer or a retry after a failed gate re-runs the step): it is never paid twice.
"""

from __future__ import annotations

import logging
import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.markup import escape

from trainteam.agents.decisions import decide
from trainteam.contract.stage_config import resolve_stage
from trainteam.contract.step_io import ToolContext
from trainteam.core import clock
from trainteam.core.errors import BadInput
from trainteam.curation.demo import read_jsonl
from trainteam.graph import NodeKind, node_id
from trainteam.graph.record import record_probe, record_recipe
from trainteam.trainers.evaluation.answer_length import size_generation
from trainteam.trainers.evaluation.answer_style import AnswerStyle, answer_style
from trainteam.trainers.evaluation.stage_gate import PRETRAIN_KINDS
from trainteam.trainers.planning import ModelShape
from trainteam.trainers.search.recipe_search import (
    FIRST_RUNG,
    MIN_ROWS,
    RATE_METRICS,
    SCORE_METRICS,
    TOP_OF_RUN,
    Plateau,
    Probe,
    Recipe,
    RecipeChoice,
    SearchReport,
    best_trial,
    choice_comparison,
    default_batch,
    final_steps,
    lr_prior,
    lr_space,
    lr_text,
    make_scorer,
    measure_pace,
    plateau_every,
    probe_length,
    probe_warmup,
    release,
    run_probes,
    rung_steps,
    split_rows,
    wasted_tops,
)
from trainteam.trainers.training import budget
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.console_lines import say
from trainteam.workflows.task.curriculum import curriculum_from_task
from trainteam.workflows.task.stage_plan import plan_stage

log = logging.getLogger("trainteam.recipe")
RESERVE = 0.15  # of the time left: evaluation, merging, registering


def _key(ctx: ToolContext, stage: str) -> str:
    return f"{ctx.run_id}/{ctx.step}/{stage}/recipe"


def searched_before(ctx: ToolContext, stage: str) -> SearchReport | None:
    """This run's search of ``stage``, read back from its Decision node."""
    nid = node_id(NodeKind.DECISION, _key(ctx, stage))
    if not ctx.graph.has_node(nid):
        return None
    return SearchReport.model_validate(ctx.graph.get_node(nid)["report"])


def _planned_s(ctx: ToolContext, stage: str) -> float:
    try:
        return plan_stage(ctx.task, stage, ctx.task.train_config(stage)).est_minutes * 60
    except Exception:  # noqa: BLE001 - a stage the planner cannot plan reserves nothing; its own step says why
        return 0.0


def _time_shares(ctx: ToolContext, stage: str, later: list[str]) -> tuple[float, float]:
    """(seconds the probes of ``stage`` may use, seconds its training may use)."""
    task = ctx.task
    allowed = ctx.allowed_s if ctx.allowed_s is not None else task.budget.allowed_s()
    ceiling = budget.current()  # the run's deadline: it counts this step's own earlier stages, spent_s does not
    left = max(0.0, ceiling.left_s() if ceiling is not None else allowed - (ctx.spent_s or 0.0))
    searched = task.search.stages or {}
    n_searched = max(1, len(searched))
    reserve = sum(_planned_s(ctx, s) for s in later if s not in searched)
    n_left = 1 + sum(1 for s in later if s in searched)
    share = max(0.0, (left * (1 - RESERVE) - reserve) / n_left)
    probes = min(task.search.budget_fraction * allowed / n_searched, task.search.budget_fraction * share * 2)
    return probes, share


def _estimate_pace(ctx: ToolContext, stage: str, cfg: TrainConfig) -> float:
    """Seconds per step before any probe ran: the planner's estimate for this batch."""
    try:
        v = plan_stage(ctx.task, stage, cfg)
        return max(v.est_minutes * 60 / cfg.max_steps, 1e-3)
    except Exception:  # noqa: BLE001 - no estimate: a guess the probes correct
        return 0.05


@dataclass
class StageRecipe:
    """What the search decided for a stage: its report (``report.chosen``: the recipe the stage-config resolver
    applies, ``trainteam.contract.stage_config``), and for a length the search chose, the training rows without
    the validation slice and the plateau check that may end the run early."""

    report: SearchReport | None = None
    rows: list[dict] | None = None
    callbacks: list = field(default_factory=list)
    warm_start: Path | None = None  # the chosen probe's checkpoint: the stage's run resumes from it


def find_recipe(
    ctx: ToolContext,
    stage: str,
    make_model: Callable[[], Any],
    data_path: Path,
    tokenizer,
    later: list[str],
    reward_funcs=None,
) -> StageRecipe:
    """The stage's recipe: the searched settings chosen (no report when nothing is searched)."""
    cfg = ctx.task.train_config(stage)
    searched = (ctx.task.search.stages or {}).get(stage)
    if not searched:
        return StageRecipe()
    rows = read_jsonl(data_path)
    report = searched_before(ctx, stage)
    if report is None:
        report = _search(ctx, stage, cfg, searched, make_model, rows, tokenizer, later, reward_funcs)
    out = StageRecipe(report)
    if report.validation_rows and len(rows) >= MIN_ROWS:  # the probes' rows: the chosen probe's run goes on over them
        out.rows, val_rows = split_rows(rows, ctx.task.data.seed)
        if "max_steps" in searched:
            score = _scorer(ctx, stage, tokenizer, val_rows)[1]
            length = resolve_stage(ctx.task, stage, recipe=report.chosen).max_steps
            out.callbacks = [Plateau(report, score, plateau_every(length))]
    probe = _continuing(report)
    if probe is not None and probe.checkpoint and Path(probe.checkpoint).is_dir():  # _continuing picks a kept one
        out.warm_start = Path(probe.checkpoint)
    return out


def _continuing(report: SearchReport) -> Probe | None:
    """The chosen probe the stage's run goes on from (its checkpoint kept), if any."""
    if not report.continued_from or report.chosen is None:
        return None
    return next((p for p in report.probes if p.checkpoint and p.learning_rate == report.chosen.learning_rate), None)


def _work(ctx: ToolContext, stage: str) -> Path:
    return ctx.ws.dir("checkpoints") / ctx.run_id / f"{stage}-search"


def _given_steps(cfg: TrainConfig, searched: list[str], rows: int, batch: int) -> int | None:
    """The length the task gave (steps, or epochs over ``rows`` as steps); None when it is searched."""
    if "max_steps" in searched:
        return None
    if cfg.max_steps:
        return cfg.max_steps
    return max(1, math.ceil((cfg.num_train_epochs or 1) * rows / (batch * cfg.gradient_accumulation_steps)))


def _warmup(cfg: TrainConfig, steps: int) -> int:
    """The stage's warm-up in steps: the task's (steps, or its ratio of ``steps``), else a twentieth of its length."""
    if cfg.warmup_ratio:
        return math.ceil(cfg.warmup_ratio * steps)
    return cfg.warmup_steps if cfg.warmup_steps else max(1, steps // 20)


def _gave_warmup(cfg: TrainConfig) -> bool:
    return bool(cfg.warmup_steps or cfg.warmup_ratio)


def search_metric(task, stage: str, style: AnswerStyle | None = None) -> tuple[str, str]:
    """(the metric the rungs rank by where it separates the probes, why): the stage's gate metric when the
    task names one the validation slice can measure; else the default gate's (``stage_gate.default_rules``):
    for free-form answers (``style``) or metrics the task names, the first of the judging metrics the slice
    can score (ROUGE-L), never exact match; else exact match after pre-training (``make_scorer`` falls back
    to held-out loss on rows without answers); held-out loss for the pre-training kinds."""
    found = curriculum_from_task(task).find(stage)
    rules = list(found.gates) if found is not None else []
    named = next((r.metric for r in rules if r.min is not None), rules[0].metric if rules else None)
    if named is not None and named in RATE_METRICS + SCORE_METRICS:
        return named, f"the stage's gate is on {named}"
    if named in ("heldout_loss", "perplexity"):
        return "heldout_loss", f"the stage's gate is on {named}"
    why = f"the gate's {named} cannot be measured on the slice" if named else "the task names no gate"
    kind = found.kind if found is not None else "post_train"
    if kind in PRETRAIN_KINDS:
        return "heldout_loss", why + f": a {kind} stage's default gate is held-out loss"
    if style is not None and (style.free_form or style.named):
        rankable = [m for m in style.judged_by if m in RATE_METRICS + SCORE_METRICS]
        head = "free-form answers" if style.free_form else "the task's metrics"
        if rankable:
            return rankable[0], why + f": {head} are judged by {', '.join(style.judged_by)}, never exact match"
        return "heldout_loss", why + f": {head} are judged by {', '.join(style.judged_by)}, never exact match"
    return "exact_match", why + f": a {kind} stage's default gate is exact match"


def _prior(task, cfg: TrainConfig, from_scratch: bool) -> tuple[list[float], float, str]:
    """(the rates to try, the prior's own rate, where they come from), for this model's width and family."""
    try:
        shape = ModelShape.from_spec(task.model, vocab_size=1)
        width, arch = shape.hidden_size, shape.arch
    except (BadInput, OSError, ValueError):  # an unreadable config: the prior's reference width
        width, arch = None, None
    lora = cfg.lora is not None
    _, _, centre, why = lr_prior(from_scratch=from_scratch, lora=lora, hidden_size=width, arch=arch)
    space = lr_space(
        cfg.method, from_scratch=from_scratch, lora=lora, n=task.search.trials, hidden_size=width, arch=arch
    )
    return space, centre, why


def _search(
    ctx: ToolContext,
    stage: str,
    cfg: TrainConfig,
    searched: list[str],
    make_model,
    rows: list[dict],
    tokenizer,
    later: list[str],
    reward_funcs,
) -> SearchReport:
    task = ctx.task
    batch = (
        cfg.per_device_train_batch_size if "per_device_train_batch_size" not in searched else default_batch(len(rows))
    )
    probe_s, share_s = _time_shares(ctx, stage, later)
    given_steps = _given_steps(cfg, searched, len(rows), batch)
    from_scratch = task.model.path is None and stage == task.stage_names()[0]  # random init: no weights before it
    space, centre, prior = _prior(task, cfg, from_scratch)
    report = SearchReport(
        stage=stage,
        method=cfg.method,
        space=space,
        prior=prior,
        prior_lr=centre,
        probe_steps=9,
        rungs=rung_steps(9),
        budget_s=round(probe_s, 1),
    )
    work = _work(ctx, stage)
    shutil.rmtree(work, ignore_errors=True)  # a search cut short (a crash) starts again: its folders mean nothing
    if "learning_rate" in searched and len(rows) >= MIN_ROWS:
        train_rows, val_rows = split_rows(rows, task.data.seed)
        report.validation_rows = len(val_rows)
        _probe(
            ctx,
            report,
            cfg,
            batch,
            given_steps,
            probe_s,
            share_s,
            make_model,
            train_rows,
            val_rows,
            tokenizer,
            work,
            reward_funcs,
        )
    elif "learning_rate" in searched:
        report.reasons.append(
            f"{len(rows)} rows: fewer than {MIN_ROWS}, too few to rank learning rates on; "
            f"the default {cfg.learning_rate:g} is kept"
        )
    _choose(ctx, report, cfg, searched, len(rows), batch, share_s, given_steps)
    kept = _continuing(report)
    release(report, work, keep=kept.trial if kept else None)
    _record(ctx, stage, report)
    return report


def _probe(
    ctx: ToolContext,
    report: SearchReport,
    cfg: TrainConfig,
    batch: int,
    given_steps: int | None,
    probe_s: float,
    share_s: float,
    make_model,
    train_rows: list[dict],
    val_rows: list[dict],
    tokenizer,
    work: Path,
    reward_funcs,
) -> None:
    """The stage's length (given, or what its share affords beside the probes), the top rung (half of it,
    less where the search's share is short), then the probes at that length."""
    task = ctx.task
    trials = task.search.trials
    began = clock.now()
    setup, pace = measure_pace(
        cfg,
        make_model,
        train_rows,
        tokenizer,
        lr=report.space[len(report.space) // 2],
        batch=batch,
        work_dir=work,
        reward_funcs=reward_funcs,
    )
    setups = 2 * trials * setup  # a probe sets up once per rung
    top = probe_length(probe_s - (clock.now() - began) - setups, pace, trials)
    waste_s = setups + wasted_tops(trials) * top * pace
    steps = given_steps or final_steps(
        share_s - (clock.now() - began) - waste_s,
        pace,
        len(train_rows),
        batch,
        cfg.gradient_accumulation_steps,
        _epochs(task),
        FIRST_RUNG * TOP_OF_RUN,
    )
    half = max(1, steps // TOP_OF_RUN)
    warmup = probe_warmup(_warmup(cfg, steps), min(top, half), _gave_warmup(cfg))
    top = max(1, min(max(top, 2 * warmup), half))  # past the warm-up, if half the stage allows
    report.probe_steps, report.rungs, report.run_steps = top, rung_steps(top, warmup), steps
    report.warmup_steps, report.pace_s = warmup, round(pace, 4)
    report.budget_s = round(probe_s - (clock.now() - began), 1)
    report.reasons.append(
        f"measured {pace:.3g} s a step and {setup:.1f} s to set up: every probe trains towards the "
        f"stage's {steps} steps after {warmup} warm-up steps, all to step {report.rungs[0]}, the "
        f"best third to {top}; the chosen one goes on from there"
    )
    say(escape(f"recipe search of {report.stage}: {report.reasons[-1]}"))
    score = _objective(ctx, report, tokenizer, val_rows)
    final = cfg.model_copy(
        update={
            "max_steps": steps,
            "num_train_epochs": None,
            "per_device_train_batch_size": batch,
            "warmup_steps": warmup,
            "warmup_ratio": None,
        }
    )
    run_probes(
        report,
        final,
        make_model,
        train_rows,
        score,
        tokenizer,
        seed=task.data.seed,
        work_dir=work,
        reward_funcs=reward_funcs,
    )


def _objective(ctx: ToolContext, report: SearchReport, tokenizer, val_rows: list[dict]):
    """The rungs' scorer: the gate's metric on the validation rows where they carry answers, and why."""
    report.objective, score = _scorer(ctx, report.stage, tokenizer, val_rows)
    metric, why = search_metric(ctx.task, report.stage, _style(ctx, val_rows))
    if report.objective != metric:
        why += "; the validation rows carry no answers to check"
    report.reasons.append(
        f"the rungs rank by {report.objective} where it separates the probes, else by held-out loss ({why})"
    )
    return score


def _choose(
    ctx: ToolContext,
    report: SearchReport,
    cfg: TrainConfig,
    searched: list[str],
    rows: int,
    batch: int,
    share_s: float,
    given_steps: int | None,
) -> None:
    """The offline pick (the best probe where two or more stable probes stood), offered to a configured model,
    then the length."""
    chosen = _pick(report)
    lr = cfg.learning_rate if chosen is None else chosen.learning_rate
    if chosen is None and "learning_rate" in searched and report.probes:
        report.reasons.append(f"no probe finished stably; the default {lr:g} is kept")
        say(f"recipe for {report.stage}: no probe finished stably; the default lr {lr:g} is kept")
    if report.run_steps is not None:
        steps = report.run_steps
        report.reasons.append(
            f"{steps} steps: " + ("what the task gave" if given_steps else _length_reason(ctx, rows, batch, share_s))
        )
    elif given_steps is None:
        pace = _estimate_pace(ctx, report.stage, cfg)
        steps = final_steps(
            share_s - report.spent_s, pace, rows, batch, cfg.gradient_accumulation_steps, _epochs(ctx.task), 9
        )
        report.reasons.append(f"{steps} steps: " + _length_reason(ctx, rows, batch, share_s, pace))
    else:
        steps = given_steps
    if chosen is not None and chosen.checkpoint:
        report.continued_from = int(Path(chosen.checkpoint).name.rsplit("-", 1)[-1])
        report.reasons.append(f"trial {chosen.trial}'s run goes on from its step {report.continued_from} to {steps}")
    warmup = report.warmup_steps if report.warmup_steps is not None and chosen is not None else _warmup(cfg, steps)
    report.chosen = Recipe(learning_rate=lr, max_steps=steps, per_device_train_batch_size=batch, warmup_steps=warmup)
    log.info("recipe for %s: %s", report.stage, report.chosen)


def _pick(report: SearchReport) -> Probe | None:
    """The best stable probe where two or more stood (``best_trial``), offered to a configured model; the
    comparison it was made at and the choice with its reason recorded and printed."""
    report.best_trial = best_trial(report)
    if report.best_trial is None:
        return None
    ok = {p.trial for p in report.probes if not p.unstable and p.values}
    comparison = choice_comparison(report, report.best_trial)
    why = f"the best at step {comparison.step}: {comparison.reason}" if comparison else "the only stable probe"
    offline = RecipeChoice(trial=report.best_trial, reason=why[:500])
    decided = decide(
        "training_engineer",
        f"Choose the learning rate for stage {report.stage} among the probes",
        report,
        offline,
        check=lambda c: None if c.trial in ok else f"trial {c.trial} is not a stable probe {sorted(ok)}",
    )
    if decided.warning:
        report.reasons.append(decided.warning)
    report.decided_by = decided.by
    chosen = next(p for p in report.probes if p.trial == decided.value.trial)
    if comparison is not None:
        comparison.going_on = [chosen.trial]
    reason = decided.value.reason or offline.reason
    report.choice_reason = reason
    report.reasons.append(f"trial {chosen.trial} (lr {chosen.learning_rate:g}): {reason}")
    by = "" if decided.by == "offline" else f" (decided by {decided.by})"
    say(escape(f"recipe for {report.stage}: lr {lr_text(chosen.learning_rate)} (probe {chosen.trial}){by}: {reason}"))
    return chosen


def _length_reason(ctx: ToolContext, rows: int, batch: int, share_s: float, pace: float | None = None) -> str:
    epochs = _epochs(ctx.task)
    afford = f"what the stage's {share_s:.0f} s afford" + (f" at {pace:.3g} s a step" if pace else " beside the probes")
    return f"{epochs:g} passes over {rows} rows at batch {batch}, or {afford}, whichever is less" if epochs else afford


def _scorer(ctx: ToolContext, stage: str, tokenizer, val_rows: list[dict]):
    """The probes' scores on the validation slice: held-out loss, and the gate's metric (``search_metric``) by
    the task's answer rule where the rows carry answers."""
    metric, _ = search_metric(ctx.task, stage, _style(ctx, val_rows))
    length = size_generation(
        tokenizer, val_rows, set_value=ctx.task.eval.max_new_tokens, where="the recipe search's validation rows"
    )  # sized from their own answers
    return make_scorer(tokenizer, val_rows, answer=ctx.task.answer, metric=metric, max_new_tokens=length.tokens)


def _style(ctx: ToolContext, val_rows: list[dict]) -> AnswerStyle:
    """The answers' style on the validation slice (``answer_style``): free-form ones are never ranked by exact
    match."""
    return answer_style(val_rows, ctx.task.answer, ctx.task.eval.metrics)


def _epochs(task) -> float | None:
    """The pass cap of a searched length: a model folder's fine-tune stops at ``search.max_epochs``
    passes (TRL's and LLaMA-Factory's default of 3: more over-fits a few hundred rows); a model
    built from scratch in this run trains for what its share of the budget affords."""
    return task.search.max_epochs if task.model.path is not None else None


def _record(ctx: ToolContext, stage: str, report: SearchReport) -> None:
    nodes = [
        record_probe(
            ctx.graph,
            f"{ctx.run_id}/{ctx.step}/{stage}/probe-{p.trial}",
            run_id=ctx.run_id,
            stage=stage,
            step_node=ctx.step_node,
            facts=p.model_dump(mode="json"),
        )
        for p in report.probes
    ]
    record_recipe(
        ctx.graph,
        _key(ctx, stage),
        run_id=ctx.run_id,
        stage=stage,
        step_node=ctx.step_node,
        probe_nodes=nodes,
        facts={
            "chosen": report.chosen.model_dump() if report.chosen else None,
            "decided_by": report.decided_by,
            "reasons": report.reasons,
            "report": report.model_dump(mode="json"),
        },
    )
