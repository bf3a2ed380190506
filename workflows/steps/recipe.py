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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trainteam.core import clock
from trainteam.agents.decisions import decide
from trainteam.agents.toolbox import ToolContext
from trainteam.curation.demo import read_jsonl
from trainteam.graph import NodeKind, node_id
from trainteam.graph.record import record_probe, record_recipe
from trainteam.trainers import budget
from trainteam.trainers.answer_length import size_generation
from trainteam.trainers.config import TrainConfig
from trainteam.trainers.recipe_search import (
    MIN_ROWS,
    Plateau,
    Probe,
    Recipe,
    RecipeChoice,
    SearchReport,
    FIRST_RUNG,
    TOP_OF_RUN,
    best_trial,
    default_batch,
    final_steps,
    lr_space,
    make_scorer,
    measure_pace,
    plateau_every,
    probe_length,
    release,
    rung_steps,
    run_probes,
    split_rows,
    wasted_tops,
)
from trainteam.workflows.stageplan import plan_stage

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
    """How a stage trains: its config, the search behind it, and for a length the search chose, the
    training rows without the validation slice and the plateau check that may end the run early."""

    cfg: TrainConfig
    report: SearchReport | None = None
    rows: list[dict] | None = None
    callbacks: list = field(default_factory=list)
    warm_start: Path | None = None  # the chosen probe's checkpoint: the stage's run resumes from it


def find_recipe(ctx: ToolContext, stage: str, make_model: Callable[[], Any], data_path: Path, tokenizer,
                later: list[str], reward_funcs=None) -> StageRecipe:
    """The stage's recipe: the searched settings chosen (the task's config when nothing is searched)."""
    cfg = ctx.task.train_config(stage)
    searched = (ctx.task.search.stages or {}).get(stage)
    if not searched:
        return StageRecipe(cfg)
    rows = read_jsonl(data_path)
    report = searched_before(ctx, stage)
    if report is None:
        report = _search(ctx, stage, cfg, searched, make_model, rows, tokenizer, later, reward_funcs)
    chosen = {} if report.chosen is None else {**report.chosen.model_dump(), "num_train_epochs": None}
    out = StageRecipe(cfg.model_copy(update=chosen), report)
    if report.validation_rows and len(rows) >= MIN_ROWS:  # the probes' rows: the chosen probe's run goes on over them
        out.rows, val_rows = split_rows(rows, ctx.task.data.seed)
        if "max_steps" in searched:
            out.callbacks = [Plateau(report, _scorer(ctx, tokenizer, val_rows)[1], plateau_every(out.cfg.max_steps))]
    probe = _continuing(report)
    if probe is not None and Path(probe.checkpoint).is_dir():
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
    return max(1, math.ceil((cfg.num_train_epochs or 1) * rows / (batch * cfg.grad_accum)))


def _warmup(cfg: TrainConfig, steps: int) -> int:
    """The stage's warm-up: the task's, else a twentieth of its length."""
    return cfg.warmup_steps if (cfg.warmup_steps or cfg.warmup_ratio) else max(1, steps // 20)


def _search(ctx: ToolContext, stage: str, cfg: TrainConfig, searched: list[str], make_model, rows: list[dict],
            tokenizer, later: list[str], reward_funcs) -> SearchReport:
    task = ctx.task
    batch = cfg.per_device_batch_size if "per_device_batch_size" not in searched else default_batch(len(rows))
    probe_s, share_s = _time_shares(ctx, stage, later)
    given_steps = _given_steps(cfg, searched, len(rows), batch)
    from_scratch = task.model.path is None and stage == task.stage_names()[0]  # random init: no weights before it
    space = lr_space(cfg.method, from_scratch=from_scratch, lora=cfg.lora is not None, n=task.search.trials)
    report = SearchReport(stage=stage, method=cfg.method, space=space, probe_steps=9, rungs=rung_steps(9),
                          budget_s=round(probe_s, 1))
    work = _work(ctx, stage)
    shutil.rmtree(work, ignore_errors=True)  # a search cut short (a crash) starts again: its folders mean nothing
    if "learning_rate" in searched and len(rows) >= MIN_ROWS:
        train_rows, val_rows = split_rows(rows, task.data.seed)
        report.validation_rows = len(val_rows)
        _probe(ctx, report, cfg, batch, given_steps, probe_s, share_s, make_model, train_rows, val_rows, tokenizer,
               work, reward_funcs)
    elif "learning_rate" in searched:
        report.reasons.append(f"{len(rows)} rows: fewer than {MIN_ROWS}, too few to rank learning rates on; "
                              f"the default {cfg.learning_rate:g} is kept")
    _choose(ctx, report, cfg, searched, len(rows), batch, share_s, given_steps)
    kept = _continuing(report)
    release(report, work, keep=kept.trial if kept else None)
    _record(ctx, stage, report)
    return report


def _probe(ctx: ToolContext, report: SearchReport, cfg: TrainConfig, batch: int, given_steps: int | None,
           probe_s: float, share_s: float, make_model, train_rows: list[dict], val_rows: list[dict], tokenizer,
           work: Path, reward_funcs) -> None:
    """The stage's length (given, or what its share affords beside the probes), the top rung (half of it,
    less where the search's share is short), then the probes at that length."""
    task = ctx.task
    trials = task.search.trials
    began = clock.now()
    setup, pace = measure_pace(cfg, make_model, train_rows, tokenizer, lr=report.space[len(report.space) // 2],
                               batch=batch, work_dir=work, reward_funcs=reward_funcs)
    setups = 2 * trials * setup  # a probe sets up once per rung
    top = probe_length(probe_s - (clock.now() - began) - setups, pace, trials)
    waste_s = setups + wasted_tops(trials) * top * pace
    steps = given_steps or final_steps(share_s - (clock.now() - began) - waste_s, pace, len(train_rows), batch,
                                       cfg.grad_accum, _epochs(task), FIRST_RUNG * TOP_OF_RUN)
    top = max(1, min(top, steps // TOP_OF_RUN))
    report.probe_steps, report.rungs, report.run_steps = top, rung_steps(top), steps
    report.budget_s = round(probe_s - (clock.now() - began), 1)
    report.reasons.append(f"measured {pace:.3g} s a step and {setup:.1f} s to set up: every probe trains towards the "
                          f"stage's {steps} steps, all to step {report.rungs[0]}, the best third to {top}; the chosen "
                          "one goes on from there")
    report.objective, score = _scorer(ctx, tokenizer, val_rows)
    final = cfg.model_copy(update={"max_steps": steps, "num_train_epochs": None, "per_device_batch_size": batch,
                                   "warmup_steps": _warmup(cfg, steps)})
    run_probes(report, final, make_model, train_rows, score, tokenizer, seed=task.data.seed, work_dir=work,
               reward_funcs=reward_funcs)


def _choose(ctx: ToolContext, report: SearchReport, cfg: TrainConfig, searched: list[str], rows: int, batch: int,
            share_s: float, given_steps: int | None) -> None:
    """The offline pick (the best objective where two or more probes stood), offered to a configured model, then
    the length."""
    report.best_trial = best_trial(report)
    lr, chosen = cfg.learning_rate, None
    if report.best_trial is not None:
        ok = {p.trial for p in report.probes if not p.unstable and p.values}
        offline = RecipeChoice(trial=report.best_trial, reason=f"the best {report.objective} at the highest step two or more "
                                                                     "stable probes reached")
        decided = decide("training_engineer", f"Choose the learning rate for stage {report.stage} among the probes",
                         report, offline,
                         check=lambda c: None if c.trial in ok else f"trial {c.trial} is not a stable probe {sorted(ok)}")
        if decided.warning:
            report.reasons.append(decided.warning)
        report.decided_by = decided.by
        chosen = next(p for p in report.probes if p.trial == decided.value.trial)
        lr = chosen.learning_rate
        report.reasons.append(f"trial {chosen.trial} (lr {lr:g}): {decided.value.reason or offline.reason}")
    elif "learning_rate" in searched and report.probes:
        report.reasons.append(f"no probe finished stably; the default {lr:g} is kept")
    if report.run_steps is not None:
        steps = report.run_steps
        report.reasons.append(f"{steps} steps: " + ("what the task gave" if given_steps else _length_reason(
            ctx, rows, batch, share_s)))
    elif given_steps is None:
        pace = _estimate_pace(ctx, report.stage, cfg)
        steps = final_steps(share_s - report.spent_s, pace, rows, batch, cfg.grad_accum, _epochs(ctx.task), 9)
        report.reasons.append(f"{steps} steps: " + _length_reason(ctx, rows, batch, share_s, pace))
    else:
        steps = given_steps
    if chosen is not None and chosen.checkpoint:
        report.continued_from = int(Path(chosen.checkpoint).name.rsplit("-", 1)[-1])
        report.reasons.append(f"trial {chosen.trial}'s run goes on from its step {report.continued_from} to {steps}")
    report.chosen = Recipe(learning_rate=lr, max_steps=steps, per_device_batch_size=batch,
                           warmup_steps=_warmup(cfg, steps))
    log.info("recipe for %s: %s", report.stage, report.chosen)


def _length_reason(ctx: ToolContext, rows: int, batch: int, share_s: float,
                   pace: float | None = None) -> str:
    epochs = _epochs(ctx.task)
    afford = f"what the stage's {share_s:.0f} s afford" + (f" at {pace:.3g} s a step" if pace else " beside the probes")
    return f"{epochs:g} passes over {rows} rows at batch {batch}, or {afford}, whichever is less" if epochs else afford


def _scorer(ctx: ToolContext, tokenizer, val_rows: list[dict]):
    """The probes' objective on the validation slice: the task's answer rule where the rows carry answers."""
    length = size_generation(tokenizer, val_rows, set_value=ctx.task.eval.max_new_tokens,
                             where="the recipe search's validation rows")  # sized from their own answers
    return make_scorer(tokenizer, val_rows, answer=ctx.task.answer, max_new_tokens=length.tokens)


def _epochs(task) -> float | None:
    """The pass cap of a searched length: a model folder's fine-tune stops at ``search.max_epochs``
    passes (TRL's and LLaMA-Factory's default of 3: more over-fits a few hundred rows); a model
    built from scratch in this run trains for what its share of the budget affords."""
    return task.search.max_epochs if task.model.path is not None else None


def _record(ctx: ToolContext, stage: str, report: SearchReport) -> None:
    nodes = [record_probe(ctx.graph, f"{ctx.run_id}/{ctx.step}/{stage}/probe-{p.trial}", run_id=ctx.run_id,
                          stage=stage, step_node=ctx.step_node, facts=p.model_dump(mode="json"))
             for p in report.probes]
    record_recipe(ctx.graph, _key(ctx, stage), run_id=ctx.run_id, stage=stage, step_node=ctx.step_node,
                  probe_nodes=nodes, facts={"chosen": report.chosen.model_dump() if report.chosen else None,
                                            "decided_by": report.decided_by, "reasons": report.reasons,
                                            "report": report.model_dump(mode="json")})
