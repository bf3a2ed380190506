"""The training engineer's recipe search: probe runs pick a stage's learning rate, and the best probe
goes on to become the stage's run.

Every probe trains with the stage's final settings at one of ``trials`` log-spaced rates (``lr_prior``;
Optuna's ``GridSampler`` order) and is stopped at two rungs: every probe at a ninth of the top rung (never
before twice the warm-up), the best third on to the top rung (at most half the stage), whose best
checkpoint is where the stage's own run resumes, so its steps are paid once. A rung (``rank``) compares the
probes on a validation slice cut from the training rows: by the gate's metric where it separates them (the
gate's noise band), else by held-out loss; ties go to the loss, an exact tie to the rate nearest the prior's.
The highest stable rate always goes on (``promoted``). An edge winner widens the range (``MAX_WIDEN``).
The rung step, the rung callback and the length rule (``final_steps``) are hand-written; why, and the
measurements behind each choice: docs/recipe-search.md.
"""

from __future__ import annotations

import math
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import AliasChoices, BaseModel, Field
from rich.markup import escape

from trainteam.core import clock
from trainteam.curation.formats import example, query, row_kind
from trainteam.trainers.evaluation.battery import exact_match, format_adherence, greedy_generations, heldout_loss
from trainteam.trainers.evaluation.metrics.metric_registry import get_metric
from trainteam.trainers.evaluation.metrics.metric_spec import AnswerRows, bootstrap_se
from trainteam.trainers.fit.loop import train
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.console_lines import say
from trainteam.trainers.training.stage_change import StageChange

REDUCTION = 3  # the best third of the probes go on from the first rung
FIRST_RUNG = 9  # the first rung sits at a ninth of the top rung
TOP_OF_RUN = 2  # the top rung sits at most at half the stage's run
NEVER = 10_000_000  # a spike monitor's warm-up that outlasts any probe: it counts non-finite values only
MIN_ROWS = 32  # fewer rows than this: nothing to probe on (8 validation rows, the rest too few to rank rates)
MAX_WIDEN = 2  # rates added beyond an edge of the prior's range when the best probe sits at that edge
PRIOR_SPAN = 4.0  # a LoRA range: the prior's rate divided and multiplied by this
RATE_METRICS = ("exact_match", "format_adherence")  # gate metrics a rung can measure on the validation slice
SCORE_METRICS = ("rouge_l", "chrf")  # free-form scores a rung can measure there (a mean of per-row scores)
TOL = 1e-4  # below a row's worth on any slice (1/128): the stored values are rounded to 5 decimals


class RungScore(BaseModel):
    """What one probe measured at a rung, on the validation slice."""

    heldout_loss: float
    metric: float | None = Field(
        default=None, description="the gate's metric (a rate, higher is better) where the search measures it"
    )
    metric_se: float | None = Field(default=None, description="a mean score's bootstrap standard error")

    def finite(self) -> bool:
        return math.isfinite(self.heldout_loss) and (self.metric is None or math.isfinite(self.metric))

    def plateau_value(self) -> float:
        """What a searched length's plateau check follows: the loss, nudged by the metric where it is measured."""
        return self.heldout_loss if self.metric is None else (1.0 - self.metric) + 0.01 * self.heldout_loss


class Probe(BaseModel):
    """One probe run: its learning rate, what it measured at each rung it reached, and its cost."""

    trial: int
    learning_rate: float
    per_device_train_batch_size: int = Field(
        validation_alias=AliasChoices("per_device_train_batch_size", "per_device_batch_size")
    )
    steps: int = Field(description="optimizer steps it ran")
    values: dict[int, float] = Field(
        default_factory=dict, description="step -> held-out loss on the validation slice (lower is better)"
    )
    metric: dict[int, float] = Field(
        default_factory=dict,
        description="step -> the gate's metric on the "
        "validation slice (SearchReport.objective; higher is better); empty when "
        "the search ranks by held-out loss alone",
    )
    metric_se: dict[int, float] = Field(
        default_factory=dict, description="step -> the metric's bootstrap standard error (ROUGE-L, chrF)"
    )
    pruned: bool = False
    unstable: bool = Field(default=False, description="a non-finite loss, grad norm or score ended it")
    widened: bool = Field(
        default=False, description="a rate beyond the prior's range, added because the best probe sat at its edge"
    )
    seconds: float = 0.0
    pace: float | None = Field(default=None, description="seconds per step from its first step to its last (no set-up)")
    checkpoint: str | None = Field(
        default=None,
        description="its checkpoint at the last rung it reached (kept for "
        "the probes still in the running: the winner's is where the stage resumes)",
    )


class Recipe(BaseModel):
    """What the stage trains with: the search's choice (and what the task gave)."""

    learning_rate: float
    max_steps: int
    per_device_train_batch_size: int = Field(
        validation_alias=AliasChoices("per_device_train_batch_size", "per_device_batch_size")
    )
    warmup_steps: int

    def change(self) -> StageChange:
        """The recipe as a change to the stage's settings: its rate, length, batch and warm-up (in steps); the
        search's length replaces any epochs, its warm-up any ratio."""
        return StageChange(
            source="recipe",
            learning_rate=self.learning_rate,
            max_steps=self.max_steps,
            per_device_train_batch_size=self.per_device_train_batch_size,
            warmup_steps=self.warmup_steps,
            clears=frozenset({"num_train_epochs", "warmup_ratio"}),
        )


class RecipeChoice(BaseModel):
    """The engineer's pick among the probes (a model may make it: agents.decisions)."""

    trial: int = Field(description="the probe whose learning rate the stage trains at")
    reason: str = Field(default="", max_length=500)


class RungComparison(BaseModel):
    """One rung's comparison of the probes that reached it, as it was made."""

    step: int
    ranked_by: str = Field(description="the gate's metric where it separated the probes, else heldout_loss")
    order: list[int] = Field(description="the stable probes' trials, best first")
    tied: list[int] = Field(
        default_factory=list,
        description="the trials the ranking cannot tell from the best: "
        "within the gate metric's noise band of it (or at exactly its loss), best first",
    )
    going_on: list[int] = Field(
        default_factory=list,
        description="the trials that went on from this rung (the first), or the one chosen here (the last)",
    )
    outcome: str = Field(default="", description="what ``going_on`` did: on to step N, or chosen")
    reason: str = ""


class SearchReport(BaseModel):
    """The search of one stage: the rates tried, every probe, each rung's comparison, the choice and its cost."""

    stage: str
    method: str
    objective: str = Field(
        default="heldout_loss",
        description="the gate's metric the rungs rank by where it "
        "separates the probes (exact_match, format_adherence), or heldout_loss",
    )
    space: list[float]
    prior: str = Field(default="", description="where the range of rates comes from")
    prior_lr: float | None = Field(default=None, description="the prior's own rate: an exact tie goes to the nearest")
    widened: list[float] = Field(default_factory=list, description="rates added beyond the range's edge")
    probe_steps: int = Field(description="the top rung: where the probes still in the running are compared")
    run_steps: int | None = Field(
        default=None, description="the stage's length every probe trains towards (its schedule); None when no probe ran"
    )
    warmup_steps: int | None = Field(
        default=None, description="the probes' (and the stage's) warm-up: done before the first rung"
    )
    rungs: list[int]
    probes: list[Probe] = Field(default_factory=list)
    comparisons: list[RungComparison] = Field(default_factory=list)
    best_trial: int | None = None
    chosen: Recipe | None = None
    choice_reason: str = Field(default="", description="why the chosen probe: its comparison, or the model's reason")
    decided_by: str = "offline"
    budget_s: float
    spent_s: float = 0.0
    pace_s: float | None = Field(default=None, description="seconds a step, measured before the probes")
    validation_rows: int = 0
    reasons: list[str] = Field(default_factory=list)
    heldout_curve: dict[int, float] = Field(
        default_factory=dict,
        description="the stage's own run: the plateau "
        "check's value on the validation slice by step (a searched length only)",
    )
    stopped_early_at: int | None = Field(default=None, description="the step the plateau rule stopped the run at")
    continued_from: int | None = Field(
        default=None,
        description="the step of the chosen probe's checkpoint the "
        "stage's run resumed from (those steps are counted in the probes)",
    )


Scorer = Callable[[Any], RungScore]  # a model (in training) -> what it measures at a rung


def make_scorer(
    tokenizer, val_rows: list[dict], *, answer=None, max_new_tokens: int = 8, metric: str = "exact_match"
) -> tuple[str, Scorer]:
    """(the metric the rungs rank by, the scorer) for the validation slice: held-out loss always, and the
    gate's ``metric`` (exact match or format adherence) where every row has an answer (pair and chat rows)
    and the task says how to check one; else the rungs rank by held-out loss alone.

    Measured on the demo's SFT from its pretrained checkpoint (benchmarks/recipe_search.py, add2): held-out
    loss at 150-460 steps ranked the rates backwards (3e-5: 0.712, 1.2e-3: 0.769, 3e-3: 0.789), because the
    loss sits on a plateau before the carries are learnt; at 600 steps lr 2.5e-3 reached 100 % exact match
    and 1e-4 9 %. Exact match at 300 steps already ranked them right (17 %, 12 %, 6.5 %)."""

    def loss(model) -> float:
        value = heldout_loss(model, tokenizer, val_rows, batch_size=32)
        model.train()
        return value

    checkable = answer is not None and val_rows and all(row_kind(r) in ("pair", "chat") for r in val_rows)
    if metric not in RATE_METRICS + SCORE_METRICS or not checkable:
        return "heldout_loss", lambda model: RungScore(heldout_loss=loss(model))
    if metric in SCORE_METRICS:
        return metric, _mean_scorer(tokenizer, val_rows, metric, max_new_tokens, loss)

    def rate(model) -> float:
        if metric == "exact_match":
            return exact_match(
                model, tokenizer, val_rows, max_new_tokens=max_new_tokens, batch_size=64, answer=answer
            ).accuracy
        gens = _slice_answers(model, tokenizer, val_rows, max_new_tokens, "format adherence")
        return format_adherence(gens, tokenizer, answer, max_new_tokens)["format_adherence"]

    return metric, lambda model: RungScore(metric=rate(model), heldout_loss=loss(model))


def _slice_answers(model, tokenizer, val_rows: list[dict], max_new_tokens: int, what: str) -> list[dict]:
    """Greedy answers to the validation slice's prompts (``battery.greedy_generations``)."""
    prompts = [query(r) for r in val_rows]
    return greedy_generations(
        model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=64, what=f"evaluation ({what})"
    )


def _mean_scorer(tokenizer, val_rows: list[dict], metric: str, max_new_tokens: int, loss: Callable) -> Scorer:
    """A free-form score (ROUGE-L, chrF: the registry's) of greedy answers on the slice, with its bootstrap
    standard error, beside the held-out loss on the answer tokens."""
    rows = AnswerRows.of([example(r) for r in val_rows])
    score = get_metric(metric).score
    assert score is not None  # SCORE_METRICS are answer metrics

    def scored(model) -> RungScore:
        gens = _slice_answers(model, tokenizer, val_rows, max_new_tokens, metric)
        result = score([g["text"] for g in gens], rows)
        return RungScore(metric=result.mean, metric_se=bootstrap_se(result.values), heldout_loss=loss(model))

    return scored


# Checks without a real improvement before a searched length stops: 5 of its 20 checks, a quarter of the run.
# Arithmetic's loss sits on plateaus before it drops (the demo's SFT at lr 1.9e-4 moved 1.11 -> 1.08 over
# 1,800 steps): 3 checks at a 1 % gain stopped that run at step 3,227 of 9,234.
PATIENCE = 5
MIN_GAIN = (0.005, 1e-3)  # an improvement counts when it beats the best by 0.5 % of it and by 0.001


def plateau_every(steps: int) -> int:
    """How often a searched length checks its held-out loss: 20 times in the run, at least every 25 steps."""
    return max(25, steps // 20)


def lr_prior(
    *, from_scratch: bool, lora: bool, hidden_size: int | None = None, arch: str | None = None
) -> tuple[float, float, float, str]:
    """(lowest, highest, the prior's own rate, where they come from) for the stage's kind of training.

    From random init 1e-4..1e-2 (the demo: 1e-3 reached 100 % from scratch, 3e-3 7-84 %); a full fine-tune
    of trained weights 3e-5..3e-3 (the demo's SFT: 5e-4 reached 100 %, 1e-3 spiked); a LoRA adapter on
    trained weights ``10 x 5e-5 x (2000 / hidden)^p`` divided and multiplied by ``PRIOR_SPAN`` (module
    docstring; SmolLM2-135M, hidden 576: 1.32e-3, so 3.3e-4..5.3e-3)."""
    if from_scratch:
        return 1e-4, 1e-2, 1e-3, "from random init: 1e-4 to 1e-2 (the demo learnt at 1e-3)"
    if not lora:
        return 3e-5, 3e-3, 3e-4, "a full fine-tune of trained weights: 3e-5 to 3e-3 (the demo's SFT learnt at 5e-4)"
    width = hidden_size or 2000
    power = 0.0775 if (arch or "").lower().startswith("qwen") else 0.781
    centre = float(f"{10 * 5e-5 * (2000 / width) ** power:.3g}")
    why = (
        f"LoRA on trained weights: 10x a full fine-tune's rate, 10 x 5e-5 x (2000/{width})^{power:g} = "
        f"{lr_text(centre)}, divided and multiplied by {PRIOR_SPAN:g}"
    )
    return centre / PRIOR_SPAN, centre * PRIOR_SPAN, centre, why


def lr_space(
    method: str, *, from_scratch: bool, lora: bool, n: int, hidden_size: int | None = None, arch: str | None = None
) -> list[float]:
    """``n`` log-spaced learning rates over the prior's range (``lr_prior``), low to high."""
    low, high, _, _ = lr_prior(from_scratch=from_scratch, lora=lora, hidden_size=hidden_size, arch=arch)
    step = (math.log(high) - math.log(low)) / max(n - 1, 1)
    return [float(f"{math.exp(math.log(low) + i * step):.3g}") for i in range(n)]


def default_batch(rows: int) -> int:
    """A batch for a stage that names none: a power of two from 8 to 64, about rows / 100."""
    return int(min(64, max(8, 2 ** round(math.log2(max(rows / 100, 1))))))


def split_rows(rows: list[dict], seed: int) -> tuple[list[dict], list[dict]]:
    """(probe training rows, validation rows): a seeded tenth, 8 to 128 rows, held out of the probes."""
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_val = min(128, max(8, len(rows) // 10))
    return [rows[i] for i in order[n_val:]], [rows[i] for i in order[:n_val]]


def rung_steps(probe_steps: int, warmup: int = 0) -> list[int]:
    """The rungs a probe is scored at: a ninth of the top rung (every probe), but never before twice the
    warm-up (by then it has trained as many steps at its own rate as it spent reaching it), and the top
    rung (the best third)."""
    first = min(probe_steps, max(1, probe_steps // FIRST_RUNG, 2 * warmup))
    return sorted({first, probe_steps})


def probe_warmup(stage_warmup: int, top: int, given: bool) -> int:
    """The warm-up the probes train with (and the stage after them, on the same schedule): the task's when it
    gave one; else the stage's default, at most half the first rung (possibly none), so no rung falls inside it."""
    return stage_warmup if given else min(stage_warmup, max(1, top // FIRST_RUNG) // 2)


def kept(trials: int) -> int:
    """How many probes go on from the first rung to the top: the best third, at least one."""
    return max(1, math.ceil(trials / REDUCTION))


def wasted_tops(trials: int) -> float:
    """The probes' steps that the stage's run does not keep, in top rungs: every trial to a ninth of it,
    ``kept`` of them on to it, less the winner's (its run continues): 1.44 for 6 trials."""
    return trials / FIRST_RUNG + kept(trials) * (1 - 1 / FIRST_RUNG) - 1


def probe_length(budget_s: float, sec_per_step: float, trials: int) -> int:
    """The top rung such that the probes' steps the run does not keep (``wasted_tops``) fit in
    ``budget_s``; at least 3 steps (the caller caps it at half the stage: ``TOP_OF_RUN``)."""
    return int(max(3, budget_s / max(sec_per_step, 1e-6) / max(wasted_tops(trials), 1e-6)))


def final_steps(
    left_s: float,
    sec_per_step: float,
    rows: int,
    batch: int,
    grad_accum: int,
    max_epochs: float | None,
    probe_steps: int,
) -> int:
    """A searched length: what ``left_s`` affords at the probes' pace (85 %: evaluation and saving
    take the rest), at most ``max_epochs`` passes over ``rows`` when given, at least the probes' length."""
    afford = int(0.85 * left_s / max(sec_per_step, 1e-6))
    passes = afford if max_epochs is None else int(math.ceil(max_epochs * rows / (batch * grad_accum)))
    return max(probe_steps, min(afford, passes))


class _StopAt:
    """A callback that scores the model at ``rung``, saves a checkpoint there and stops (the probe may go
    on later from it); at the search's deadline it stops unsaved."""

    def __new__(cls, probe: Probe, rung: int, score: Scorer, deadline: float):
        from transformers import TrainerCallback

        class StopAt(TrainerCallback):
            first: tuple[int, float] | None = None

            def on_step_end(self, args, state, control, model=None, **kwargs):
                step, now = state.global_step, clock.now()
                probe.steps = step
                if self.first is None:
                    self.first = (step, now)
                elif step > self.first[0]:
                    probe.pace = round((now - self.first[1]) / (step - self.first[0]), 5)
                if now > deadline:  # the search's share of the budget is spent
                    probe.pruned = True
                    control.should_training_stop = True
                    return control
                if step < rung:
                    return control
                scored = score(model)
                model.train()
                control.should_training_stop = True
                if not scored.finite():
                    probe.unstable = True
                    return control
                probe.values[step] = round(scored.heldout_loss, 5)
                if scored.metric is not None:
                    probe.metric[step] = round(scored.metric, 5)
                if scored.metric_se is not None:
                    probe.metric_se[step] = round(scored.metric_se, 5)
                control.should_save = True
                return control

        return StopAt()


class Plateau:
    """A callback for a stage whose length the search chose: the scorer's ``plateau_value`` on the validation
    slice every ``every`` steps (``report.heldout_curve``), and a stop after ``PATIENCE`` checks that do not
    beat the best by ``MIN_GAIN`` (the loss has flattened, or risen: over-fitting)."""

    def __new__(cls, report: SearchReport, score: Scorer, every: int):
        from transformers import TrainerCallback

        best = [math.inf, 0]  # best value, checks since it

        class Stop(TrainerCallback):
            def on_step_end(self, args, state, control, model=None, **kwargs):
                step = state.global_step
                if step % every or step >= state.max_steps:
                    return control
                value = score(model).plateau_value()
                model.train()
                report.heldout_curve[step] = round(value, 5)
                if math.isinf(best[0]) or value < best[0] - max(MIN_GAIN[0] * best[0], MIN_GAIN[1]):
                    best[0], best[1] = value, 0
                else:
                    best[1] += 1
                if best[1] >= PATIENCE:
                    report.stopped_early_at = step
                    control.should_training_stop = True
                return control

        return Stop()


def _probe_config(cfg: TrainConfig, lr: float, out: Path) -> TrainConfig:
    """The stage's own settings at ``lr``, in the probe's folder (resumed there from its last rung), with the
    spike monitor watching for non-finite values only: a probe is judged by its objective at the rung, where
    a jump that did not recover shows, and a jump that did costs nothing. Measured on 2-digit subtraction
    towards 600 steps: the monitor stopped the lr 3e-3 probe at step ~238, out of the running; unmonitored,
    the same probe scored 0.884 at step 300 against the other finalist's 0.924, and its run reached 71.5 %
    exact match (the grid's best: 39 %). The stage's own run keeps the monitor and its gated restart."""
    jumps_off = cfg.spike.model_copy(update={"warmup_steps": NEVER})
    return cfg.model_copy(
        update={
            "learning_rate": lr,
            "output_dir": out,
            "resume": "auto",
            "save_steps": None,
            "tracker": "none",
            "spike": jumps_off,
        }
    )


@dataclass
class ProbeRun:
    """What every probe of one search trains with: the stage's final settings, the model, the rows, the scorer."""

    cfg: TrainConfig
    make_model: Callable[[], Any]
    rows: list[dict]
    score: Scorer
    tokenizer: Any
    work_dir: Path
    deadline: float = math.inf
    reward_funcs: list | None = None
    objective: str = "heldout_loss"


def _train_to(probe: Probe, run: ProbeRun, rung: int, out: Path) -> str | None:
    """A real ``train()`` of ``probe`` in ``out`` (resumed from its checkpoint there) to ``rung``, scored there
    (``_StopAt``); the reason it stopped."""
    label = f"probe {probe.trial} (lr {lr_text(probe.learning_rate)})"  # its step lines, while a run listens
    result = train(
        run.cfg.method,
        _probe_config(run.cfg, probe.learning_rate, out),
        run.make_model(),
        run.rows,
        tokenizer=run.tokenizer,
        progress=label,
        reward_funcs=run.reward_funcs,
        callbacks=[_StopAt(probe, rung, run.score, run.deadline)],
    )
    return result.stopped_reason


def _advance(probe: Probe, run: ProbeRun, rung: int) -> None:
    """Train ``probe`` on from its last rung to ``rung`` and print what it measured there."""
    out = run.work_dir / f"probe-{probe.trial}"
    began = clock.now()
    try:
        stopped = _train_to(probe, run, rung, out)
    finally:
        probe.seconds = round(probe.seconds + clock.now() - began, 2)
    if stopped == "spike":
        probe.unstable = True
    saved = out / f"checkpoint-{rung}"
    if probe.unstable:
        probe.checkpoint = None
    elif rung in probe.values and saved.is_dir():
        probe.checkpoint = str(saved)
    # else (the deadline came first): its checkpoint at the rung before stays where it can go on from
    say(escape(probe_line(probe, rung, run.objective)))


def lr_text(rate: float) -> str:
    """A learning rate as a person writes it: 5e-3, 2.5e-4."""
    mantissa, exponent = f"{rate:.2e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def probe_line(probe: Probe, rung: int, objective: str = "heldout_loss") -> str:
    """One probe's result at ``rung``, as the run prints it."""
    head = f"  probe {probe.trial} (lr {lr_text(probe.learning_rate)}) at step {rung}: "
    if probe.unstable:
        return head + f"unstable (a non-finite loss or score by step {probe.steps}), out"
    if rung not in probe.values:
        return head + f"stopped at step {probe.steps}: the search's time ran out"
    shown = f"{objective} {probe.metric[rung]:.3f}, " if rung in probe.metric else ""
    return head + f"{shown}held-out loss {probe.values[rung]:.4f} ({probe.seconds:.0f} s so far)"


def _drop(probe: Probe, work_dir: Path) -> None:
    """A probe out of the running leaves no weights behind."""
    probe.checkpoint = None
    shutil.rmtree(work_dir / f"probe-{probe.trial}", ignore_errors=True)


def run_probes(
    report: SearchReport,
    cfg: TrainConfig,
    make_model: Callable[[], Any],
    rows: list[dict],
    score: Scorer,
    tokenizer,
    *,
    seed: int,
    work_dir: Path,
    reward_funcs=None,
) -> None:
    """Every rate of ``report.space`` (Optuna's seeded grid order) to the first rung, the range widened while its
    best sits at an edge, the best third on to the top rung (``cfg`` holds the stage's final settings); fills
    ``report`` and prints each probe and each rung's comparison. The probes at the top keep their checkpoints
    there (``Probe.checkpoint``); the rest keep nothing."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        direction="minimize", sampler=optuna.samplers.GridSampler({"learning_rate": report.space}, seed=seed)
    )
    start = clock.now()
    run = ProbeRun(
        cfg, make_model, rows, score, tokenizer, work_dir, start + report.budget_s, reward_funcs, report.objective
    )
    first, top = report.rungs[0], report.rungs[-1]
    prior = f" ({report.prior})" if report.prior else ""
    say(
        escape(
            f"recipe search of {report.stage}: lr {', '.join(lr_text(r) for r in report.space)}{prior}; "
            f"every probe to step {first}, the best third to {top}; ranked by {report.objective} where it "
            "separates them, else by held-out loss"
        )
    )

    def objective(trial) -> float:
        lr = trial.suggest_float("learning_rate", min(report.space), max(report.space), log=True)
        probe = Probe(
            trial=trial.number, learning_rate=lr, steps=0, per_device_train_batch_size=cfg.per_device_train_batch_size
        )
        report.probes.append(probe)
        _advance(probe, run, first)
        if probe.unstable or probe.pruned or first not in probe.values:
            _drop(probe, work_dir)
            raise optuna.TrialPruned()
        return probe.values[first]

    study.optimize(objective, n_trials=len(report.space), catch=())
    _widen(report, run, first, top)
    on = promoted(report, first, kept(len(report.space)))
    for p in report.probes:
        if p not in on and p.checkpoint:
            p.pruned = True
            _drop(p, work_dir)
    top = _affordable_top(report, on, first, top, run.deadline)
    _compared(report, first, on, f"on to step {top}" if top > first else "chosen among at this rung")
    for p in on if top > first else []:
        _advance(p, run, top)
        if p.checkpoint is None:
            _drop(p, work_dir)
    if clock.now() > run.deadline:
        report.reasons.append(f"the search's {report.budget_s:.0f} s were spent after {len(report.probes)} probes")
    report.spent_s = round(clock.now() - start, 2)


def _compared(report: SearchReport, rung: int, going_on: list[Probe], what: str) -> None:
    """Record and print the comparison at ``rung`` and which probes go on (or the one chosen)."""
    order, comparison = rank(report, report.probes, rung)
    if not order:
        return
    comparison.going_on, comparison.outcome = [p.trial for p in going_on], what
    report.comparisons.append(comparison)
    said = ", ".join(f"lr {lr_text(p.learning_rate)}" for p in going_on)
    say(escape(f"  step {rung}: {comparison.reason}; {what}: {said or 'none'}"))


def _widen(report: SearchReport, run: ProbeRun, first: int, top: int) -> None:
    """While the best probe at the first rung sits at an edge of the rates tried, one more rate a grid step
    beyond that edge, to the first rung (``MAX_WIDEN`` at most, and only while the top rung stays affordable)."""
    ratio = report.space[1] / report.space[0] if len(report.space) > 1 else 2.0
    for _ in range(MAX_WIDEN):
        order, _ = rank(report, report.probes, first)
        rates = [p.learning_rate for p in report.probes]
        if not order or min(rates) < order[0].learning_rate < max(rates):
            return
        up = order[0].learning_rate == max(rates)
        lr = float(f"{order[0].learning_rate * (ratio if up else 1 / ratio):.3g}")
        if not _affords_another(report, first, top, run.deadline):
            report.reasons.append(
                f"the best probe sat at the {'top' if up else 'bottom'} of the range; no time "
                f"left to widen it to lr {lr_text(lr)}"
            )
            return
        say(
            escape(
                f"  the best probe at step {first} sits at the {'top' if up else 'bottom'} of the range: "
                f"widened to lr {lr_text(lr)}"
            )
        )
        probe = Probe(
            trial=len(report.probes),
            learning_rate=lr,
            per_device_train_batch_size=run.cfg.per_device_train_batch_size,
            steps=0,
            widened=True,
        )
        report.probes.append(probe)
        report.widened.append(lr)
        _advance(probe, run, first)
        if probe.unstable or probe.pruned or first not in probe.values:
            _drop(probe, run.work_dir)
            return


def _median(values: list[float]) -> float | None:
    return sorted(values)[len(values) // 2] if values else None


def probe_costs(report: SearchReport, probes: list[Probe]) -> tuple[float, float]:
    """(seconds a probe's run costs beyond its steps: setting up, scoring and saving at the rung; seconds a step),
    from what ``probes`` really cost: their step-to-step pace (else the pace measured before them, else their
    seconds per step), the rest of their seconds the overhead. A short first rung is mostly overhead (measured
    on the issue's SmolLM2 LoRA under load: 17-28 s a probe to step 1 at 4.5 s a step), a long one mostly steps
    (the demo's SFT: 0.051-0.065 s a step with scoring and saving, against 0.046 s measured before)."""
    ran = [p for p in probes if p.steps]
    per_step = _median([p.pace for p in ran if p.pace]) or report.pace_s or _median([p.seconds / p.steps for p in ran])
    overhead = _median([max(0.0, p.seconds - p.steps * (per_step or 0.0)) for p in ran]) or 0.0
    return overhead, per_step or 1.0


def _affords_another(report: SearchReport, first: int, top: int, deadline: float) -> bool:
    """Whether one more probe to the first rung leaves the time the top rung needs (at the first rung's cost)."""
    done = [p for p in report.probes if first in p.values and p.steps]
    if not done:
        return False
    overhead, per_step = probe_costs(report, done)
    n = kept(len(report.space))
    need = overhead + first * per_step + n * (overhead + (top - first) * per_step)
    return clock.now() + need <= deadline


def _affordable_top(report: SearchReport, on: list[Probe], first: int, top: int, deadline: float) -> int:
    """The top rung the time left affords the probes going on, at what the first rung really cost
    (``probe_costs``); the first rung when nothing more fits (the best there goes on from its checkpoint).
    Sets the report's rungs."""
    if on:
        overhead, per_step = probe_costs(report, on)
        left = 0.9 * (deadline - clock.now()) - len(on) * overhead
        top = min(top, first + max(0, int(left / (len(on) * per_step))))
    top = max(first, top)
    if top != report.rungs[-1]:
        report.reasons.append(f"the top rung moved to step {top}: what the search's time left affords")
    report.probe_steps, report.rungs = top, sorted({first, top})
    return top


def release(report: SearchReport, work_dir: Path, keep: int | None) -> None:
    """The probes' folders removed, but the one of trial ``keep`` (where the stage resumes)."""
    for p in report.probes:
        if p.trial != keep:
            _drop(p, work_dir)


def rank(report: SearchReport, probes: list[Probe], rung: int) -> tuple[list[Probe], RungComparison]:
    """The stable probes that reached ``rung``, best first, and the comparison that ordered them: by the gate's
    metric when its spread reaches its noise band (the registry's: a rate's two binomial standard errors, at
    least two rows; probes less than a band apart tied, the tie broken by held-out loss), else by held-out loss;
    an exact tie in loss goes to the rate nearest the prior's."""
    live = [p for p in probes if rung in p.values and not p.unstable]
    centre = report.prior_lr or math.exp(sum(math.log(r) for r in report.space) / max(len(report.space), 1))

    def by_loss(p: Probe) -> tuple[float, float]:
        return p.values[rung], abs(math.log(p.learning_rate / centre))

    name, why = report.objective, "held-out loss ranks them"
    if name != "heldout_loss" and live and all(rung in p.metric for p in live):
        rates = [p.metric[rung] for p in live]
        ses = [p.metric_se[rung] for p in live if rung in p.metric_se]
        band = get_metric(name).band(max(rates), report.validation_rows, max(ses) if ses else None)
        spread = f"{name} {min(rates):.3g} to {max(rates):.3g}, noise band {band:.2g}"
        if max(rates) - min(rates) >= band - TOL:  # the gate's own convention: a band's difference counts
            tiers = _tiers(live, rung, band, by_loss)
            order = [p for tier in tiers for p in tier]
            return order, RungComparison(
                step=rung,
                ranked_by=name,
                order=[p.trial for p in order],
                tied=[p.trial for p in tiers[0]],
                reason=f"{spread}: {name} ranks them (held-out loss breaks ties within the band)",
            )
        why = f"{spread}: {name} does not separate them, held-out loss ranks them"
    elif name != "heldout_loss":
        why = f"held-out loss ranks them ({name} not measured at this step)"
    order = sorted(live, key=by_loss)
    tied = [p.trial for p in order if order and p.values[rung] == order[0].values[rung]]
    if len(tied) > 1:
        why += "; an exact tie in loss went to the rate nearest the prior's"
    return order, RungComparison(
        step=rung, ranked_by="heldout_loss", order=[p.trial for p in order], tied=tied, reason=why
    )


def _tiers(live: list[Probe], rung: int, band: float, key: Callable[[Probe], Any]) -> list[list[Probe]]:
    """``live`` by the metric, highest first, in tiers of probes less than ``band`` below the tier's best (as the
    gate counts a gain of a band as real), each tier by ``key`` (held-out loss)."""
    rest, out = sorted(live, key=lambda p: -p.metric[rung]), []
    while rest:
        tier = [p for p in rest if p.metric[rung] > rest[0].metric[rung] - band + TOL]
        out.append(sorted(tier, key=key))
        rest = [p for p in rest if all(p is not t for t in tier)]
    return out


def promoted(report: SearchReport, rung: int, n: int) -> list[Probe]:
    """The ``n`` probes that go on from ``rung``: the highest stable rate, the highest rate the ranking cannot
    tell from the best (``RungComparison.tied``), then ``rank``'s order. The first two hedge against what a
    short probe cannot see, not a tie-break (the choice at the last rung is ``rank``'s alone): a high rate
    often measures worst early and best at the end. Measured on the demo's addition SFT towards 600 steps:
    step 66 ranked 3e-3 last and 1.9e-4 first, and only 2.5e-3 was at 100 % by step 600; on the benchmark's
    sub2 (issue 31), at step 40 exact match could not tell 1.19e-3 from the best (8.6 % against 10.2 % on 128
    rows) and held-out loss put it 4th of 5 such, yet a run of 600 steps at 1.19e-3 reached 98.5 %, at 3e-3
    (the highest) 9.5 %, and the grid's at 5e-4 (beside 4.75e-4, the lowest loss) 40.5 %."""
    live = [p for p in report.probes if p.checkpoint and rung in p.values and not p.unstable]
    if not live:
        return []
    order, comparison = rank(report, live, rung)
    highest = max(live, key=lambda p: p.learning_rate)
    bold = max((p for p in order if p.trial in comparison.tied), key=lambda p: p.learning_rate)
    out: list[Probe] = []
    for p in [highest, bold] + order:
        if all(p is not q for q in out):
            out.append(p)
    return out[:n]


def final_rung(report: SearchReport) -> int | None:
    """The highest rung that two or more stable probes reached (one probe alone at a rung is no comparison),
    else the first rung any stable probe reached."""
    stable = [p for p in report.probes if not p.unstable and p.values]
    reached = sorted({r for p in stable for r in p.values})
    if not reached:
        return None
    shared = [r for r in reached if sum(r in p.values for p in stable) >= 2]
    return shared[-1] if shared else reached[0]


def best_trial(report: SearchReport) -> int | None:
    """The best stable probe (``rank``) at ``final_rung``."""
    rung = final_rung(report)
    if rung is None:
        return None
    order, _ = rank(report, report.probes, rung)
    return order[0].trial if order else None


def choice_comparison(report: SearchReport, chosen: int) -> RungComparison | None:
    """The comparison the choice was made at (``final_rung``), recorded and printed once."""
    rung = final_rung(report)
    if rung is None:
        return None
    _, comparison = rank(report, report.probes, rung)
    comparison.going_on, comparison.outcome = [chosen], "chosen"
    report.comparisons.append(comparison)
    return comparison


class _Pace:
    """A callback timing a short run: seconds to its first step (set-up) and per step after it."""

    def __new__(cls, times: list[float]):
        from transformers import TrainerCallback

        class Pace(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                times.append(clock.now())
                return control

        return Pace()


def measure_pace(
    cfg: TrainConfig,
    make_model: Callable[[], Any],
    rows: list[dict],
    tokenizer,
    *,
    lr: float,
    batch: int,
    work_dir: Path,
    steps: int = 6,
    reward_funcs=None,
) -> tuple[float, float]:
    """(set-up seconds, seconds per step) of this stage on this machine now: a ``steps``-step run at ``lr``
    before the probes, so their length fits the budget under whatever load the machine has."""
    out = work_dir / "pace"
    times: list[float] = []
    began = clock.now()
    try:
        short = cfg.model_copy(
            update={
                "max_steps": steps,
                "num_train_epochs": None,
                "per_device_train_batch_size": batch,
                "warmup_steps": 1,
                "warmup_ratio": None,
            }
        )
        train(
            cfg.method,
            _probe_config(short, lr, out),
            make_model(),
            rows,
            tokenizer=tokenizer,
            progress=f"pace ({steps} steps at lr {lr_text(lr)})",
            reward_funcs=reward_funcs,
            callbacks=[_Pace(times)],
        )
    finally:
        shutil.rmtree(out, ignore_errors=True)
    if len(times) < 2:
        return clock.now() - began, clock.now() - began
    return times[0] - began, (times[-1] - times[0]) / (len(times) - 1)


def sec_per_step(report: SearchReport) -> float:
    """The probes' median seconds per optimizer step, from their first step to their last (rung evaluations
    included, set-up not: a run sets up once)."""
    paces = sorted(p.pace if p.pace else p.seconds / p.steps for p in report.probes if p.steps)
    return paces[len(paces) // 2] if paces else 1.0
