"""The training engineer's recipe search: probe runs pick a stage's learning rate, and the best probe
goes on to become the stage's run.

Every probe trains with the stage's final settings (its length, schedule, warm-up and batch) at
one of ``trials`` log-spaced learning rates, and is stopped at two rungs: every probe at a ninth of
the top rung, the best third of them (by ``make_scorer``'s objective on a validation slice cut from
the TRAINING rows; the eval set is never looked at) on to the top rung, and the best there is not
thrown away: its checkpoint at the top rung is where the stage's own run resumes. A stage of L steps
with 6 trials and the top rung at L/2 costs about 1.72 L steps in all (every trial to L/18, two to
L/2, one to L), against the 5.25 L of a 3 x 3 grid of full runs at L/4, L/2 and L.

Why the winner continues, measured (benchmarks/recipe_search.py, the demo's addition SFT): the
rates only separate late (lr 2.5e-3: 9 % exact match at 150 steps, 17 % at 300, 100 % at 600;
1e-4: 9 % at 600), so probes that stop at a quarter of the run and then start the run again picked
1.9e-4 and reached 7 % of the grid's best for a third of its compute. Letting the top rung be part
of the real run, paid once, is what affords probes that long.

Why the top rung is half the run and the first rung short, measured on 3-digit addition towards 600
steps (the benchmark's add3): at step 200 lr 1.19e-3 led 3e-3 (objective 0.338 against 0.464), at
step 300 3e-3 led (0.283 against 0.385), and at step 600 3e-3 reached 97 % exact match, 1.19e-3
90.5 %. A cosine schedule still holds a high rate near its peak a third of the way in, so the
comparison there favours the lower rate. The first rung only has to drop the hopeless: the highest
stable rate goes on whatever it scores (``promoted``), so a ninth of the top is enough, and it pays
for the later comparison (1.72 L in all, against 1.78 L with the rungs at L/9 and L/3).

Optuna supplies the seeded order of the grid of rates (``GridSampler``) and the study that records
each probe's value. The rung step is hand-written (a sort): Optuna's ``SuccessiveHalvingPruner`` is
asynchronous (a trial reaching a rung first competes with itself only, so the first trial always ran
to the top) and cannot pause a trial and resume it, which the continuation needs. Also hand-written,
because no library does it: the rung callback (the objective at the rung steps; a checkpoint saved
there) and the length rule (``final_steps``). Runs are sequential and seeded, so a search is the same
given the seed and thread count.
"""

from __future__ import annotations

import math
import random
import shutil
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, Field

from trainteam.core import clock
from trainteam.curation.formats import row_kind
from trainteam.trainers.config import TrainConfig
from trainteam.trainers.eval_battery import exact_match, heldout_loss
from trainteam.trainers.training import train

REDUCTION = 3  # the best third of the probes go on from the first rung
FIRST_RUNG = 9  # the first rung sits at a ninth of the top rung
TOP_OF_RUN = 2  # the top rung sits at most at half the stage's run
NEVER = 10_000_000  # a spike monitor's warm-up that outlasts any probe: it counts non-finite values only
MIN_ROWS = 32  # fewer rows than this: nothing to probe on (8 validation rows, the rest too few to rank rates)


class Probe(BaseModel):
    """One probe run: its learning rate, the objective at each rung it reached, and its cost."""

    trial: int
    learning_rate: float
    per_device_batch_size: int
    steps: int = Field(description="optimizer steps it ran")
    values: dict[int, float] = Field(default_factory=dict, description="step -> the objective on the validation "
                                     "slice (SearchReport.objective; lower is better)")
    pruned: bool = False
    unstable: bool = Field(default=False, description="a non-finite loss, grad norm or objective ended it")
    seconds: float = 0.0
    pace: float | None = Field(default=None, description="seconds per step from its first step to its last (no set-up)")
    checkpoint: str | None = Field(default=None, description="its checkpoint at the last rung it reached (kept for "
                                   "the probes still in the running: the winner's is where the stage resumes)")


class Recipe(BaseModel):
    """What the stage trains with: the search's choice (and what the task gave)."""

    learning_rate: float
    max_steps: int
    per_device_batch_size: int
    warmup_steps: int


class RecipeChoice(BaseModel):
    """The engineer's pick among the probes (a model may make it: agents.decisions)."""

    trial: int = Field(description="the probe whose learning rate the stage trains at")
    reason: str = Field(default="", max_length=500)


class SearchReport(BaseModel):
    """The search of one stage: the rates tried, every probe, the choice and what it cost."""

    stage: str
    method: str
    objective: str = "heldout_loss"
    space: list[float]
    probe_steps: int = Field(description="the top rung: where the probes still in the running are compared")
    run_steps: int | None = Field(default=None, description="the stage's length every probe trains towards "
                                  "(its schedule); None when no probe ran")
    rungs: list[int]
    probes: list[Probe] = Field(default_factory=list)
    best_trial: int | None = None
    chosen: Recipe | None = None
    decided_by: str = "offline"
    budget_s: float
    spent_s: float = 0.0
    validation_rows: int = 0
    reasons: list[str] = Field(default_factory=list)
    heldout_curve: dict[int, float] = Field(default_factory=dict, description="the stage's own run: the objective "
                                            "on the validation slice by step (a searched length only)")
    stopped_early_at: int | None = Field(default=None, description="the step the plateau rule stopped the run at")
    continued_from: int | None = Field(default=None, description="the step of the chosen probe's checkpoint the "
                                       "stage's run resumed from (those steps are counted in the probes)")


# Checks without a real improvement before a searched length stops: 5 of its 20 checks, a quarter of the run.
# Arithmetic's loss sits on plateaus before it drops (the demo's SFT at lr 1.9e-4 moved 1.11 -> 1.08 over
# 1,800 steps): 3 checks at a 1 % gain stopped that run at step 3,227 of 9,234.
Scorer = Callable[[Any], float]  # a model (in training) -> the objective at a rung, lower is better


def make_scorer(tokenizer, val_rows: list[dict], *, answer=None, max_new_tokens: int = 8) -> tuple[str, Scorer]:
    """(its name, the objective) for the validation slice: where every row has an answer (pair and chat
    rows) and the task says how to check one, ``1 - exact match + 0.01 x held-out loss`` (the gate's own
    metric; the loss breaks ties while nothing is right yet); else held-out loss alone (text rows).

    Measured on the demo's SFT from its pretrained checkpoint (benchmarks/recipe_search.py, add2): held-out
    loss at 150-460 steps ranked the rates backwards (3e-5: 0.712, 1.2e-3: 0.769, 3e-3: 0.789), because the
    loss sits on a plateau before the carries are learnt; at 600 steps lr 2.5e-3 reached 100 % exact match
    and 1e-4 9 %. Exact match at 300 steps already ranked them right (17 %, 12 %, 6.5 %)."""
    def loss(model) -> float:
        value = heldout_loss(model, tokenizer, val_rows, batch_size=32)
        model.train()
        return value

    if answer is None or not val_rows or any(row_kind(r) not in ("pair", "chat") for r in val_rows):
        return "heldout_loss", loss

    def score(model) -> float:
        right = exact_match(model, tokenizer, val_rows, max_new_tokens=max_new_tokens, batch_size=64,
                            answer=answer).accuracy
        return (1.0 - right) + 0.01 * loss(model)

    return "1 - exact_match + 0.01 heldout_loss", score


PATIENCE = 5
MIN_GAIN = (0.005, 1e-3)  # an improvement counts when it beats the best by 0.5 % of it and by 0.001


def plateau_every(steps: int) -> int:
    """How often a searched length checks its held-out loss: 20 times in the run, at least every 25 steps."""
    return max(25, steps // 20)


def lr_space(method: str, *, from_scratch: bool, lora: bool, n: int) -> list[float]:
    """``n`` log-spaced learning rates for the stage's kind of training (low to high).

    From random init 1e-4..1e-2 (the demo: 1e-3 reached 100 % from scratch, 3e-3 7-84 %); a full
    fine-tune of trained weights 3e-5..3e-3 (the demo's SFT: 5e-4 reached 100 %, 1e-3 spiked);
    a LoRA adapter 5e-5..5e-3 (the SmolLM2 fixture learnt at 1e-3)."""
    low, high = (1e-4, 1e-2) if from_scratch else (5e-5, 5e-3) if lora else (3e-5, 3e-3)
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


def rung_steps(probe_steps: int) -> list[int]:
    """The rungs a probe is scored at: a ninth of the top rung (every probe) and the top rung (the best third)."""
    return sorted({max(1, probe_steps // FIRST_RUNG), probe_steps})


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


def final_steps(left_s: float, sec_per_step: float, rows: int, batch: int, grad_accum: int,
                max_epochs: float | None, probe_steps: int) -> int:
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
                value = score(model)
                model.train()
                control.should_training_stop = True
                if not math.isfinite(value):
                    probe.unstable = True
                    return control
                probe.values[step] = round(value, 5)
                control.should_save = True
                return control

        return StopAt()


class Plateau:
    """A callback for a stage whose length the search chose: held-out loss on the validation slice every
    ``every`` steps (``report.heldout_curve``), and a stop after ``PATIENCE`` checks that do not beat the
    best by ``MIN_GAIN`` (the loss has flattened, or risen: over-fitting)."""

    def __new__(cls, report: SearchReport, score: Scorer, every: int):
        from transformers import TrainerCallback

        best = [math.inf, 0]  # best loss, checks since it

        class Stop(TrainerCallback):
            def on_step_end(self, args, state, control, model=None, **kwargs):
                step = state.global_step
                if step % every or step >= state.max_steps:
                    return control
                value = score(model)
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
    return cfg.model_copy(update={"learning_rate": lr, "output_dir": out, "resume": "auto", "save_steps": None,
                                  "tracker": "none", "spike": jumps_off})


def _advance(probe: Probe, cfg: TrainConfig, rung: int, make_model, rows, score: Scorer, tokenizer, *,
             work_dir: Path, deadline: float, reward_funcs) -> None:
    """Train ``probe`` on from its last rung to ``rung`` (a real ``train()``, resumed from its checkpoint)."""
    out = work_dir / f"probe-{probe.trial}"
    began = clock.now()
    try:
        result = train(cfg.method, _probe_config(cfg, probe.learning_rate, out), make_model(), rows,
                       tokenizer=tokenizer, progress=False, reward_funcs=reward_funcs,
                       callbacks=[_StopAt(probe, rung, score, deadline)])
    finally:
        probe.seconds = round(probe.seconds + clock.now() - began, 2)
    if result.stopped_reason == "spike":
        probe.unstable = True
    saved = out / f"checkpoint-{rung}"
    if probe.unstable:
        probe.checkpoint = None
    elif rung in probe.values and saved.is_dir():
        probe.checkpoint = str(saved)
    # else (the deadline came first): its checkpoint at the rung before stays where it can go on from


def _drop(probe: Probe, work_dir: Path) -> None:
    """A probe out of the running leaves no weights behind."""
    probe.checkpoint = None
    shutil.rmtree(work_dir / f"probe-{probe.trial}", ignore_errors=True)


def run_probes(report: SearchReport, cfg: TrainConfig, make_model: Callable[[], Any], rows: list[dict],
               score: Scorer, tokenizer, *, seed: int, work_dir: Path, reward_funcs=None) -> None:
    """Every rate of ``report.space`` (Optuna's seeded grid order) to the first rung, the best third on to the
    top rung (``cfg`` holds the stage's final settings); fills ``report``. The probes at the top keep their
    checkpoints there (``Probe.checkpoint``); the rest keep nothing."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.GridSampler(
        {"learning_rate": report.space}, seed=seed))
    start = clock.now()
    deadline = start + report.budget_s
    first, top = report.rungs[0], report.rungs[-1]
    batch = cfg.per_device_batch_size

    def objective(trial) -> float:
        lr = trial.suggest_float("learning_rate", min(report.space), max(report.space), log=True)
        probe = Probe(trial=trial.number, learning_rate=lr, per_device_batch_size=batch, steps=0)
        report.probes.append(probe)
        _advance(probe, cfg, first, make_model, rows, score, tokenizer, work_dir=work_dir, deadline=deadline,
                 reward_funcs=reward_funcs)
        if probe.unstable or probe.pruned or first not in probe.values:
            _drop(probe, work_dir)
            raise optuna.TrialPruned()
        return probe.values[first]

    study.optimize(objective, n_trials=len(report.space), catch=())
    on = promoted(report, first, kept(len(report.space)))
    for p in report.probes:
        if p not in on and p.checkpoint:
            p.pruned = True
            _drop(p, work_dir)
    top = _affordable_top(report, on, first, top, deadline)
    for p in on if top > first else []:
        _advance(p, cfg, top, make_model, rows, score, tokenizer, work_dir=work_dir, deadline=deadline,
                 reward_funcs=reward_funcs)
        if p.checkpoint is None:
            _drop(p, work_dir)
    if clock.now() > deadline:
        report.reasons.append(f"the search's {report.budget_s:.0f} s were spent after {len(report.probes)} probes")
    report.spent_s = round(clock.now() - start, 2)


def _affordable_top(report: SearchReport, on: list[Probe], first: int, top: int, deadline: float) -> int:
    """The top rung the time left affords the probes going on, at what the first rung really cost a step
    (scoring and saving included: on the demo's SFT 0.051-0.065 s against the 0.046 s measured before);
    the first rung when nothing more fits (the best there goes on from its checkpoint). Sets the report's rungs."""
    costs = sorted(p.seconds / p.steps for p in on if p.steps)
    if costs:
        per_step = costs[len(costs) // 2]
        top = min(top, first + int(0.9 * (deadline - clock.now()) / (len(on) * per_step)))
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


def noise_band(report: SearchReport, best: float) -> float:
    """How far apart two probes' objectives must be to differ: on exact match two binomial standard errors
    of the best's rate on the validation slice (10 % right on 128 rows: 0.053), at least 0.01; on loss 0.5 %."""
    if report.objective == "heldout_loss" or not report.validation_rows:
        return 0.005 * abs(best)
    right = min(max(1.0 - best, 0.0), 1.0)
    return max(0.01, 2 * math.sqrt(right * (1 - right) / report.validation_rows))


def _by_rate_within_band(report: SearchReport, probes: list[Probe], rung: int) -> list[Probe]:
    """``probes`` in the order the search prefers them at ``rung``: those within the noise band of the best,
    highest rate first, then the rest by objective. A short probe undervalues a high rate (measured on the
    demo's addition SFT towards 600 steps: at step 66 lr 3e-3 was last, 1.9e-4 first, and only 2.5e-3 was
    at 100 % by step 600), so a tie on what the probes can tell apart goes to the higher rate."""
    best = min(p.values[rung] for p in probes)
    band = best + noise_band(report, best)
    return sorted(probes, key=lambda p: (0, -p.learning_rate) if p.values[rung] <= band else (1, p.values[rung]))


def promoted(report: SearchReport, rung: int, n: int) -> list[Probe]:
    """The ``n`` probes that go on from ``rung``: the highest stable rate (it is the one a short probe
    judges worst of all if it is the long run's best), then ``_by_rate_within_band``."""
    live = [p for p in report.probes if p.checkpoint and rung in p.values and not p.unstable]
    if not live:
        return []
    highest = max(live, key=lambda p: p.learning_rate)
    return ([highest] + [p for p in _by_rate_within_band(report, live, rung) if p is not highest])[:n]


def best_trial(report: SearchReport) -> int | None:
    """The stable probe with the lowest objective at the highest rung that two or more stable probes
    reached (one probe alone at a rung is no comparison), else at the first rung; a tie within the noise
    band goes to the higher rate (``_by_rate_within_band``)."""
    stable = [p for p in report.probes if not p.unstable and p.values]
    if not stable:
        return None
    reached = sorted({r for p in stable for r in p.values})
    shared = [r for r in reached if sum(r in p.values for p in stable) >= 2]
    rung = shared[-1] if shared else reached[0]
    at_rung = [p for p in stable if rung in p.values]
    return _by_rate_within_band(report, at_rung, rung)[0].trial


class _Pace:
    """A callback timing a short run: seconds to its first step (set-up) and per step after it."""

    def __new__(cls, times: list[float]):
        from transformers import TrainerCallback

        class Pace(TrainerCallback):
            def on_step_end(self, args, state, control, **kwargs):
                times.append(clock.now())
                return control

        return Pace()


def measure_pace(cfg: TrainConfig, make_model: Callable[[], Any], rows: list[dict], tokenizer, *, lr: float,
                 batch: int, work_dir: Path, steps: int = 6, reward_funcs=None) -> tuple[float, float]:
    """(set-up seconds, seconds per step) of this stage on this machine now: a ``steps``-step run at ``lr``
    before the probes, so their length fits the budget under whatever load the machine has."""
    out, times = work_dir / "pace", []
    began = clock.now()
    try:
        short = cfg.model_copy(update={"max_steps": steps, "num_train_epochs": None, "per_device_batch_size": batch,
                                       "warmup_steps": 1, "warmup_ratio": None})
        train(cfg.method, _probe_config(short, lr, out), make_model(), rows, tokenizer=tokenizer,
              progress=False, reward_funcs=reward_funcs, callbacks=[_Pace(times)])
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
