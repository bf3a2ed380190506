"""A task checked completely before any run exists: what ``trainteam validate TASK`` runs.

In order, each check a line of what it found: the task file parses (TRL/Axolotl key names
included); the model folder holds a config, safetensors weights and a tokenizer that loads,
with or without a chat template; then ``preflight.check_runnable`` (the same preflight a run
passes: the workflow's steps, secrets, model settings, trackers, ``trl:`` blocks, every data
row and column, the planner's refusals); then per stage the training rows and a sample's
tokens with the task's tokenizer (the longest against ``seq_len``), the ``trl:`` fields
passed through, and the plan: steps, tokens, time at the throughput measured on this machine,
memory, against the budget. The first failing check raises ``BadInput`` naming the field.

Nothing is written: no workspace, no database. The one file a check may leave is the
throughput measurement in the user's cache (``trainers.planning.calibrate.cache_dir``), which
later plans of the same model on this machine read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from trainteam.contract.train_task import TrainTask, load_task_file
from trainteam.core.errors import BadInput
from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.planning.estimate import ModelShape
from trainteam.trainers.planning.tokens import model_tokenizer
from trainteam.trainers.training.chat_templates import template_choice
from trainteam.workflows.engine.spec import load_builtin
from trainteam.workflows.task.eval_plan import planned_gates, planned_length, planned_style
from trainteam.workflows.task.preflight import check_runnable
from trainteam.workflows.task.stage_plan import data_tokens, plan_stage


@dataclass(frozen=True)
class Check:
    name: str
    status: Literal["ok", "warn"]
    found: str

    def line(self) -> str:
        return f"{'✓' if self.status == 'ok' else '!'} {self.name}: {self.found}"


class CheckFailed(BadInput):
    """The first check that failed: its name, and the one-line error naming the field."""

    def __init__(self, name: str, error: BadInput):
        self.check = name
        super().__init__(str(error))


def check_task(path: Path, *, measure: bool = True) -> Iterator[Check]:
    """Every check of the task file at ``path``, in order; raises ``CheckFailed`` at the first failure."""
    source = str(path)
    task = _run("task", lambda: load_task_file(path))
    yield Check("task", "ok", f"{task.name}: stages {', '.join(task.stage_names())}, workflow {task.workflow}")
    yield _run("model", lambda: model_check(task, source))
    _run("preflight", lambda: check_runnable(load_builtin(task.workflow), task, source))
    yield Check(
        "preflight",
        "ok",
        "workflow steps, secrets, model settings, trackers, trl blocks, every data row "
        "and column, and the planner's refusals",
    )
    yield answers_check(task, source)
    yield from judging_checks(task)
    if task.distributed is not None:
        yield distributed_check(task)
    for stage in task.stage_names():
        yield from stage_checks(task, stage, source, measure)


def answers_check(task: TrainTask, source: str) -> Check:
    """How long a greedy answer may be in exact match, format adherence and GRPO (``workflows/task/eval_plan.py``)."""
    length = planned_length(task, source)
    if length is None:
        return Check(
            "answers",
            "ok",
            "answer checks generate as many tokens as the longest held-out answer needs "
            "(plus a margin), sized once the run's tokenizer exists"
            if task.eval.max_new_tokens is None
            else f"answer checks generate up to {task.eval.max_new_tokens} new tokens (eval.max_new_tokens; "
            "checked against the held-out answers once the run's tokenizer exists)",
        )
    return Check("answers", "ok", f"answer checks generate up to {length.describe()}")


def judging_checks(task: TrainTask) -> Iterator[Check]:
    """Which metrics will judge the answers and why (``eval_plan.planned_style``), then each stage's gate."""
    style = planned_style(task)
    if style is not None:
        yield Check("judging", "ok", style.line())
    for stage, text in planned_gates(task, style).items():
        yield Check(f"gate ({stage})", "ok", text)


def distributed_check(task: TrainTask) -> Check:
    """How the training stages will be launched (``distributed:``)."""
    d = task.distributed
    assert d is not None  # asked of a task with its distributed: section
    per = d.num_processes // d.num_machines
    where = (
        f"{d.num_machines} machines x {per} processes (this is machine {d.machine_rank}; the others run "
        "launch/node<R>.sh)"
        if d.num_machines > 1
        else f"{per} processes on this machine"
    )
    return Check(
        "distributed",
        "ok",
        f"{d.strategy} over {where}, started by {d.launcher}; a dead rank: the "
        f"stage launches again from its newest complete checkpoint (up to {d.max_restarts} times)",
    )


def _run(name: str, fn: Callable):
    try:
        return fn()
    except CheckFailed:
        raise
    except BadInput as exc:
        raise CheckFailed(name, exc) from None


def model_check(task: TrainTask, source: str) -> Check:
    """The model folder: its config (architecture, parameters), weights, tokenizer and chat template."""
    spec = task.model
    if spec.path is None:
        return Check(
            "model",
            "ok",
            f"{spec.arch} from random init ({spec.hidden_size} hidden x {spec.num_layers} "
            f"layers); the run trains its tokenizer (vocab {task.tokenizer.vocab_size}), no chat template",
        )
    folder = Path(spec.path)
    shape = ModelShape.from_config_json(folder / "config.json")
    weights = sorted(folder.glob("*.safetensors"))
    size = sum(w.stat().st_size for w in weights)
    try:
        tok = model_tokenizer(str(folder), spec.chat_template)
    except (BadInput, OSError, ValueError) as exc:
        why = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise BadInput(f"{source}: model.path: {folder}: the tokenizer does not load ({why})") from None
    template = template_choice(folder, tok, spec.chat_template)  # stated, never silent: the run's template
    return Check(
        "model",
        "ok",
        f"{folder.name}: {shape.arch}, {shape.num_params():,} parameters, {len(weights)} "
        f"safetensors file{'s' if len(weights) != 1 else ''} ({size / 2**20:,.0f} MiB); tokenizer loads "
        f"(vocab {len(tok):,}); {template}",
    )


def _over_length(task: TrainTask, stage: str, max_length: int, lengths: list[int]) -> str:
    """What happens to the sampled examples longer than ``max_length``: a run that fine-tunes a local model curates
    them away (``rows.over_length``, unless the task's ``curation.rows`` says otherwise: ``workflows/steps/curate``),
    else the trainer cuts them there."""
    over = sum(n > max_length for n in lengths)
    rows = (task.curation or {}).get("rows", {})
    dropped = task.model.path is not None and rows is not None and not (isinstance(rows, dict) and "max_tokens" in rows)
    fate = (
        f"the curate step drops them (rows.over_length); a larger training.{stage}.max_length keeps them"
        if dropped
        else "cut there in training"
    )
    return f"{over} of {len(lengths)} longer than max_length {max_length}: {fate}"


def stage_checks(task: TrainTask, stage: str, source: str, measure: bool) -> Iterator[Check]:
    cfg = task.train_config(stage)
    counted = data_tokens(task, stage, cfg.method)
    if counted is not None:
        tokens = counted.tokens
        rows = f"{counted.rows:,} training rows" if counted.rows else "training rows"
        over = tokens.longest > cfg.max_length and get_method(cfg.method).cuts_rows
        yield Check(
            f"tokens ({stage})",
            "warn" if over else "ok",
            f"{rows}; {tokens.describe()}; "
            + (
                _over_length(task, stage, cfg.max_length, tokens.lengths)
                if over
                else f"within max_length {cfg.max_length}"
            ),
        )
    if cfg.trl:
        trl_class = get_method(cfg.method).trl_config.rpartition(".")[2]
        yield Check(f"trl ({stage})", "ok", f"{trl_class} takes {', '.join(sorted(cfg.trl))}")
    verdict = _run(f"plan ({stage})", lambda: plan_stage(task, stage, cfg, measure=measure))
    if not verdict.runnable:  # preflight passed, so only a repairable refusal is left: say it
        why = "; ".join(f"{r['field']}: {r['reason']}" for r in verdict.refusals)
        raise CheckFailed(f"plan ({stage})", BadInput(f"{source}: training.{stage}: {why}"))
    budget = task.budget.allowed_s() / 60
    over = verdict.est_minutes > budget
    how = verdict.estimate_note if verdict.throughput_source == "measured" else "assumed: a FLOP guess, not measured"
    found = (
        f"{verdict.max_steps} steps, {verdict.total_tokens:,} tokens, ~{verdict.est_minutes:.1f} min at "
        f"{verdict.tokens_per_second:,.0f} tokens/s ({how}), {verdict.memory_gib:.2f} GiB per device; "
        f"budget {budget:g} min" + (": the plan needs more, the run will ask a person at the ceiling" if over else "")
    )
    if verdict.length_note:
        found += f"; {verdict.length_note}"
    if verdict.fixes:
        found += f"; the engineer will apply {verdict.fixes}"
    yield Check(f"plan ({stage})", "warn" if over else "ok", found)
    recipe = recipe_check(task, stage)
    if recipe is not None:
        yield recipe


def recipe_check(task: TrainTask, stage: str) -> Check | None:
    """What the training engineer chooses for ``stage`` (the recipe search), or the default rate it takes."""
    searched = (task.search.stages or {}).get(stage)
    if searched:
        share = task.search.budget_fraction * task.budget.allowed_s() / 60 / max(1, len(task.search.stages or {}))
        return Check(
            f"recipe ({stage})",
            "ok",
            f"{', '.join(searched)} not given: the training engineer searches "
            f"them ({task.search.trials} learning rates, probes of at most {share:.1f} min), then sets the "
            "stage's length from the pace the probes measure and the time left; the plan's steps above "
            "are the estimate before that",
        )
    if stage in task.search.align_lr:
        return Check(
            f"recipe ({stage})",
            "ok",
            f"learning_rate not given: {task.search.align_lr[stage]:g}, "
            f"the default for {task.train_config(stage).method}",
        )
    return None
