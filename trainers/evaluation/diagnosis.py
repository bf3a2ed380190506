"""The judge's diagnosis of a failed gate, and the bounded retry plan that follows from it (pure; no torch).

``diagnose(GateEvidence)`` reads what the run measured for the gated stage — its training-loss
curve, its held-out loss (and the held-out loss of an earlier attempt), what curation removed, the
spike monitor's spikes, the recipe search's probes — and names one cause:

- ``instability``: a non-finite loss, a spike the monitor saw, or a curve that rose well above
  where it started (``RISE``) or, late, above its own best (``LATE_RISE``) → a lower learning rate;
- ``data``: most eval problems also in the training data (``LEAK_SHARE``), too few rows to train
  on (``MIN_ROWS``), or an over-fit on rows seen over and over (``MEMORISED_EPOCHS``) or left
  after curation removed more than the task tolerates → stop (or ``more_data``: a person brings
  rows; a retry on the same rows cannot help);
- ``over_fit``: held-out loss far above a low training loss (``GAP_RATIO``, ``GAP_NATS``), or
  held-out loss that rose between attempts while the training loss fell → fewer steps;
- ``ceiling``: the recipe search's probes ended at the same held-out loss whatever the learning
  rate (``FLAT``) and the full run got no further on a flat curve → stop;
- ``measurement`` (named by the gate itself, ``trainers/evaluation/stage_gate.py``): a checked answer metric read the
  same for the input and the trained model while the held-out loss fell → stop: the instrument is blind,
  and no retrain can fix what the judge cannot see;
- ``under_fit``: the training loss was still falling at the end (``STILL_FALLING``) → more
  steps; or it barely moved over a run long enough to move it (``BARELY``, ``LONG_ENOUGH``) → a
  higher learning rate.

The plan is bounded whatever proposes it (``check_plan``, also the bound on a model's diagnosis):
the learning rate within 0.1×–10× of the attempt's, at most 4× the attempt's steps and no more than
the time the budget leaves allows at the attempt's measured pace (``BUDGET_SHARE`` of what is left
after the later stages' estimate). A plan that cannot change the outcome — the same settings
again (a seeded retrain repeats itself), or no budget for even as many steps — is ``stop``.

Thresholds, measured on tiny real runs (2-layer 64-wide Llama, pretrain 60 steps at lr 1e-3, then
SFT at batch 16 on 2-digit addition with operands ≤ 20: 260 curated rows, 32 eval problems; one
CPU thread; the gate exact match ≥ 0.99 failed in every run):

- ``STILL_FALLING = 0.02``: the last quarter's mean loss below the quarter before it by 2 % or
  more. Runs that more steps improved fell 3.9 % (SFT 150 steps, exact match 0.03; 600 steps
  reached 0.31, 1,500 steps 0.94), 4.6 % (20 steps), 4.1 % (pretrain 300 steps), 26 % and 57 %
  (600 and 1,500 steps); the standard error of a quarter's mean is 0.2–1.4 % of it, so a
  difference of two such means under 2 % is noise. At lr 1e-5 the curve fell 0.2 %.
- ``BARELY = 0.9`` and ``LONG_ENOUGH = 50``: at lr 1e-3 SFT fell 22 % in 20 steps and 58 % in
  150; at lr 1e-5 it fell 3 % in 150 steps (final/first 0.97): a loss above 90 % of its start
  after 50 steps or more, on a flat curve, is a learning rate too low, not a run too short (a
  6-step pretrain fell 1 %: too short). Under 5 % (``STUCK``) the rate goes up 10× (the bound),
  else 3×.
- ``RISE = 1.5``: healthy runs never logged a loss above 1.14× their first; at lr 0.1 SFT jumped
  from 2.84 to 6.64 (2.3×) within five steps and ended at held-out 1.65 against 1.15 at lr 1e-3.
  From 2× up the rate is cut to a tenth, else to 0.3×.
- ``LATE_RISE = 1.25``: the last quarter's mean over the curve's best quarter-long stretch;
  every healthy run ended at its best (≤ 1.001×).
- ``GAP_RATIO = 2`` with ``GAP_NATS = 0.25``: healthy runs ended with held-out loss ≤ 1.3× the
  training loss (600 steps: 0.51 vs 0.40) or within 0.07 nats of it (1,500 steps: 0.126 vs
  0.057, 2.2×, exact match 0.94); 400 steps on 40 rows ended at 0.01 vs 2.50.
- ``HELDOUT_ROSE = 0.05``: held-out loss 5 % above the earlier attempt's (eval noise on 32
  problems: the 1e-3/3e-3/1e-2 100-step runs spread 0.995–1.14).
- ``MEMORISED_EPOCHS = 20``: that over-fit saw each of its 40 rows 160 times; a fine-tune of a
  pretrained LLM runs 1–5 epochs, where an over-fit is the recipe's, not the data's.
- ``FLAT = 0.03``: 100-step runs at lr 3e-4 … 1e-2 ended 202 % apart in held-out loss on a
  16-wide model (3.81 … 1.26) and 66 % apart on the 64-wide one (1.65 … 0.995): a learning rate
  that matters moves the loss far more than 3 %.
- ``LEAK_SHARE = 0.25``: the demo plants 10 % of its eval problems in the training data (curation
  removes them) and trains to 100 %; a quarter of the eval set leaked means the split is suspect.
- ``MIN_ROWS = 32``: the recipe search's own floor (``recipe_search.MIN_ROWS``).
- ``BUDGET_SHARE = 0.8``: a retry's train step took 15 % longer than its training (tiny run:
  0.50 s step, 0.43 s training); the rest of the 20 % is for evaluating and gating it.
"""

from __future__ import annotations

import math
from statistics import fmean
from typing import Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from trainteam.trainers.training.stage_change import Clearable, StageChange

DiagnosisKind = Literal["under_fit", "over_fit", "instability", "data", "ceiling", "measurement"]
Action = Literal["more_steps", "lower_lr", "higher_lr", "fewer_steps", "more_data", "stop"]

STILL_FALLING = 0.02
BARELY = 0.9
STUCK = 0.95
LONG_ENOUGH = 50
RISE = 1.5
LATE_RISE = 1.25
GAP_RATIO = 2.0
GAP_NATS = 0.25
HELDOUT_ROSE = 0.05
MEMORISED_EPOCHS = 20.0
FLAT = 0.03
LEAK_SHARE = 0.25
MIN_ROWS = 32
# A flat loss after curation dropped most rows is blamed on the data only when few rows are left: the demo's
# dedup drops 57 % of its generated problems (11,484 exact duplicates) and leaves 8,516 distinct ones, and a
# flat SFT loss there (1.09 at lr 1.9e-4) was a rate too low, not too little data.
FEW_ROWS = 1000
MAX_STEPS_FACTOR = 4.0
LR_BOUNDS = (0.1, 10.0)
BUDGET_SHARE = 0.8  # of the budget left: evaluating, saving and loading take the rest (a retry measured ~15 %)


class ProbePoint(BaseModel):
    """One recipe-search probe as the judge reads it: its rate and its held-out loss at each rung."""

    learning_rate: float = Field(gt=0)
    steps: int = Field(ge=0)
    values: dict[int, float] = Field(default_factory=dict, description="step -> held-out loss")
    pruned: bool = False
    unstable: bool = False


class Attempt(BaseModel):
    """An earlier attempt of the same gate (the visit before a retry): its settings and results."""

    steps: int = Field(ge=0)
    learning_rate: float | None = None
    heldout_loss: float | None = None
    final_loss: float | None = None
    value: float | None = Field(None, description="the gate metric it reached")


class GateEvidence(BaseModel):
    """What the run measured for the gated stage, gathered by the gate step (numbers only)."""

    model_config = ConfigDict(extra="forbid")
    stage: str
    method: str = "sft"
    metric: str = "exact_match"
    value: float | None = Field(None, description="the gate metric measured")
    bar: float | None = Field(None, description="the threshold it failed")
    losses: list[tuple[int, float | None]] = Field(
        default_factory=list, description="(step, training loss); None: not finite"
    )
    heldout_loss: float | None = None
    earlier: list[Attempt] = Field(default_factory=list)
    steps: int = Field(0, ge=0, description="optimizer steps the stage ran")
    max_steps: int = Field(1, gt=0)
    num_train_epochs: float | None = None
    learning_rate: float = Field(3e-4, gt=0)
    warmup_steps: int = 0
    batch_rows: int = Field(8, gt=0, description="rows per optimizer step (batch × accumulation × devices)")
    n_train: int | None = Field(None, description="rows the stage trained on")
    n_eval: int | None = Field(None, description="problems the eval set held, before any leaked ones were removed")
    rows_in: int | None = Field(None, description="rows before curation")
    rows_out: int | None = Field(None, description="rows after curation")
    max_drop_fraction: float | None = 0.5
    leaks: int = Field(0, ge=0, description="eval problems also found in the training data")
    spikes: int = Field(0, ge=0, description="spikes the monitor saw in this stage")
    probes: list[ProbePoint] = Field(default_factory=list)
    seconds_per_step: float | None = None
    fixed_s: float = Field(0.0, ge=0, description="what a retry spends besides this stage's steps")
    budget_left_s: float | None = Field(None, description="seconds the run may still spend after the later stages")


class Measured(BaseModel):
    """The numbers a diagnosis rests on (finite, or None where not measured)."""

    first_loss: float | None = None
    final_loss: float | None = None
    tail_drop: float | None = Field(None, description="last quarter's mean loss below the quarter before, relative")
    rise: float | None = Field(None, description="highest logged loss over the first")
    late_rise: float | None = Field(None, description="last quarter's mean over the best quarter-long window")
    nonfinite: int = 0
    spikes: int = 0
    heldout_loss: float | None = None
    gap_ratio: float | None = Field(None, description="held-out over final training loss")
    heldout_change: float | None = Field(None, description="held-out loss against the earlier attempt, relative")
    epochs: float | None = Field(None, description="passes over the training rows")
    drop_fraction: float | None = None
    leak_share: float | None = None
    n_train: int | None = None
    probe_spread: float | None = Field(None, description="(worst - best) / best held-out loss of the probes")
    probe_best: float | None = None
    steps: int = 0
    learning_rate: float | None = None
    affordable_steps: int | None = Field(None, description="steps the budget left allows at the measured pace")

    def line(self) -> str:
        """The numbers measured, as ``name value`` pairs (the ones not measured left out)."""
        return ", ".join(
            f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
            for k, v in self.model_dump(exclude_none=True).items()
        )


class ConfigChanges(BaseModel):
    """New values for the stage's TrainConfig fields (None: unchanged)."""

    model_config = ConfigDict(extra="forbid")
    max_steps: int | None = Field(None, gt=0)
    num_train_epochs: float | None = Field(None, gt=0)
    learning_rate: float | None = Field(None, gt=0, le=10)
    warmup_steps: int | None = Field(None, ge=0)

    def given(self) -> dict[str, float | int]:
        return self.model_dump(exclude_none=True)

    def change(self) -> StageChange:
        """These values as a retry's change: steps without epochs clear the stage's epochs, epochs without
        steps clear its steps (the one given decides the length)."""
        clears: frozenset[Clearable] = frozenset()
        if self.max_steps is not None and self.num_train_epochs is None:
            clears = frozenset({"num_train_epochs"})
        elif self.num_train_epochs is not None and self.max_steps is None:
            clears = frozenset({"max_steps"})
        return StageChange(
            source="retry",
            max_steps=self.max_steps,
            num_train_epochs=self.num_train_epochs,
            learning_rate=self.learning_rate,
            warmup_steps=self.warmup_steps,
            clears=clears,
        )


class RetryPlan(BaseModel):
    """What the retry changes for the gated stage, and why; ``stop`` and ``more_data`` do not retrain."""

    model_config = ConfigDict(extra="forbid")
    action: Action
    stage: str
    changes: ConfigChanges = Field(default_factory=ConfigChanges)
    reason: str = Field(max_length=500)

    @property
    def retrains(self) -> bool:
        return self.action not in ("stop", "more_data")

    def change(self) -> StageChange:
        """The change the retry makes to the stage's settings (ValueError: a plan that does not retrain)."""
        if not self.retrains:
            raise ValueError(f"retry: a {self.action} plan does not retrain")
        return self.changes.change()

    def line(self) -> str:
        shown = ", ".join(f"{k} {_num(v)}" for k, v in self.changes.given().items())
        return f"{self.action.replace('_', ' ')}" + (f" ({shown})" if shown else "") + f": {self.reason}"


class Diagnosis(BaseModel):
    """The judge's verdict on why a gate failed, the numbers it read, and the retry plan."""

    model_config = ConfigDict(extra="forbid")
    kind: DiagnosisKind
    summary: str = Field(max_length=500)
    evidence: Measured = Field(default_factory=Measured)
    plan: RetryPlan
    decided_by: str = "offline"
    warning: str | None = None

    def line(self) -> str:
        return f"diagnosis {self.kind.replace('_', '-')}: {self.summary}; plan: {self.plan.line()}"


def _num(v: float) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def _finite(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b <= 0 else a / b


def measure(ev: GateEvidence) -> Measured:
    """The curve's shape and the other numbers the rules read, from the raw evidence."""
    ys = [y for _, y in ev.losses]
    finite = [y for y in ys if y is not None and math.isfinite(y)]
    bad_heldout = ev.heldout_loss is not None and _finite(ev.heldout_loss) is None
    m = Measured(
        nonfinite=len(ys) - len(finite) + bad_heldout,
        spikes=ev.spikes,
        heldout_loss=_finite(ev.heldout_loss),
        n_train=ev.n_train,
        steps=ev.steps,
        learning_rate=ev.learning_rate,
    )
    if finite:
        q = max(1, len(finite) // 4)
        last = fmean(finite[-q:])
        windows = [fmean(finite[i : i + q]) for i in range(len(finite) - q + 1)]
        m.first_loss, m.final_loss = finite[0], last
        m.rise = _ratio(max(finite), finite[0])
        m.late_rise = _ratio(last, min(windows))
        if len(finite) >= 2:
            before = fmean(finite[-2 * q : -q]) if len(finite) >= 2 * q else finite[0]
            m.tail_drop = _ratio(before - last, before)
    m.gap_ratio = _ratio(m.heldout_loss, m.final_loss)
    prev = next((a for a in reversed(ev.earlier) if _finite(a.heldout_loss) is not None), None)
    if prev is not None and prev.heldout_loss is not None and m.heldout_loss is not None:
        m.heldout_change = _ratio(m.heldout_loss - prev.heldout_loss, prev.heldout_loss)
    if ev.n_train:
        m.epochs = round(ev.steps * ev.batch_rows / ev.n_train, 3)
    if ev.rows_in and ev.rows_out is not None:
        m.drop_fraction = round(1 - ev.rows_out / ev.rows_in, 4)
    if ev.n_eval:
        m.leak_share = round(min(1.0, ev.leaks / ev.n_eval), 4)
    m.probe_best, m.probe_spread = probe_spread(ev.probes)
    m.affordable_steps = affordable_steps(ev)
    return m


def affordable_steps(ev: GateEvidence) -> int | None:
    """Steps of this stage a retry can pay for: ``BUDGET_SHARE`` of the budget left, less what the
    retry spends besides (the other stages it trains again), at the attempt's seconds per step."""
    if ev.budget_left_s is None or not ev.seconds_per_step:
        return None
    return max(0, int((BUDGET_SHARE * ev.budget_left_s - ev.fixed_s) / ev.seconds_per_step))


def blind(ev: GateEvidence, reason: str) -> Diagnosis:
    """The gate's own verdict that its metric could not measure the stage: no retrain helps."""
    return Diagnosis(
        kind="measurement",
        summary=reason[:500],
        evidence=measure(ev),
        plan=RetryPlan(
            action="stop",
            stage=ev.stage,
            reason="the metric must see the task before a "
            "retrain can be judged: fix the answer check (eval.max_new_tokens, answer:)",
        ),
    )


def diagnose(ev: GateEvidence) -> Diagnosis:
    """The offline judge: the first rule that holds names the cause, and its plan is bounded."""
    m = measure(ev)
    cause = _cause(ev, m)
    plan = _bounded(ev, m, cause)
    return Diagnosis(kind=cause.kind, summary=cause.summary[:500], evidence=m, plan=plan)


class _Cause(NamedTuple):
    kind: DiagnosisKind
    summary: str
    action: Action
    factor: float = 1.0  # on the steps (more/fewer_steps) or the learning rate (lower/higher_lr)


def _cause(ev: GateEvidence, m: Measured) -> _Cause:
    """The rules in order: instability, data, over-fit, ceiling, under-fit, then what is left."""
    found = _instability(m) or _data(ev, m) or _over_fit(ev, m) or _ceiling(m) or _under_fit(ev, m)
    if found is not None:
        return found
    few = ev.n_train is not None and ev.n_train < FEW_ROWS
    if few and m.drop_fraction is not None and m.drop_fraction > (ev.max_drop_fraction or 0.5):
        return _Cause(
            "data",
            f"curation removed {m.drop_fraction:.0%} of the rows, {ev.n_train} are left, and the "
            f"loss flattened at {_show(m.final_loss)}: too little data left",
            "more_data",
        )
    return _Cause(
        "under_fit",
        f"the training loss flattened at {_show(m.final_loss)} with held-out loss "
        f"{_show(m.heldout_loss)} close to it: no sign of over-fit or instability, so a "
        "longer run at this rate",
        "more_steps",
        2.0,
    )


def _show(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.3g}"


def _instability(m: Measured) -> _Cause | None:
    if m.nonfinite:
        return _Cause("instability", f"{m.nonfinite} losses were not finite", "lower_lr", 0.1)
    if m.rise is not None and m.rise >= RISE:
        return _Cause(
            "instability",
            f"the training loss rose to {m.rise:.2f}× its first value ({_show(m.first_loss)})",
            "lower_lr",
            0.1 if m.rise >= 2 else 0.3,
        )
    if m.spikes:
        return _Cause("instability", f"the spike monitor saw {m.spikes} loss spike(s) in this stage", "lower_lr", 0.3)
    if m.late_rise is not None and m.late_rise >= LATE_RISE:
        return _Cause(
            "instability",
            f"the training loss ended {m.late_rise:.2f}× above its best stretch (diverging)",
            "lower_lr",
            0.3,
        )
    return None


def _data(ev: GateEvidence, m: Measured) -> _Cause | None:
    if m.leak_share is not None and m.leak_share >= LEAK_SHARE:
        return _Cause(
            "data",
            f"{ev.leaks} eval problems ({m.leak_share:.0%}) also occur in the training data: "
            "the split is suspect, so the gate cannot be judged on it",
            "stop",
        )
    if ev.n_train is not None and ev.n_train < MIN_ROWS:
        return _Cause(
            "data", f"{ev.n_train} training rows (fewer than {MIN_ROWS}) are too few to learn from", "more_data"
        )
    return None


def _over_fit(ev: GateEvidence, m: Measured) -> _Cause | None:
    gap = m.heldout_loss - m.final_loss if m.heldout_loss is not None and m.final_loss is not None else None
    if m.gap_ratio is not None and m.gap_ratio >= GAP_RATIO and gap is not None and gap >= GAP_NATS:
        seen = (
            f"held-out loss {m.heldout_loss:.3g} is {m.gap_ratio:.1f}× the training loss {m.final_loss:.3g} (over-fit)"
        )
    elif m.heldout_change is not None and m.heldout_change >= HELDOUT_ROSE and (m.tail_drop or 0) > 0:
        seen = f"held-out loss rose {m.heldout_change:.0%} against the earlier attempt while training loss fell"
    else:
        return None
    dropped = m.drop_fraction is not None and m.drop_fraction > (ev.max_drop_fraction or 0.5)
    if dropped:
        return _Cause(
            "data",
            f"{seen}; curation removed {m.drop_fraction:.0%} of the rows: the model memorised what was left",
            "more_data",
        )
    if (m.epochs or 0) >= MEMORISED_EPOCHS:
        return _Cause(
            "data",
            f"{seen}; each of the {ev.n_train} rows was seen {m.epochs:.0f} times: the model memorised them",
            "more_data",
        )
    return _Cause("over_fit", seen, "fewer_steps", 0.5)


def _ceiling(m: Measured) -> _Cause | None:
    flat_curve = m.tail_drop is None or m.tail_drop < STILL_FALLING
    flat_probes = m.probe_spread is not None and m.probe_spread <= FLAT
    near_best = m.heldout_loss is not None and m.probe_best is not None and m.heldout_loss >= (1 - FLAT) * m.probe_best
    if not (flat_probes and flat_curve and near_best):
        return None
    return _Cause(
        "ceiling",
        f"the probes reached held-out loss {m.probe_best:.3g} within {m.probe_spread:.1%} of "
        f"each other at every learning rate, and the run ended on a flat curve at "
        f"{m.heldout_loss:.3g}: neither the rate nor more steps moves it",
        "stop",
    )


def _under_fit(ev: GateEvidence, m: Measured) -> _Cause | None:
    if m.first_loss is None or m.final_loss is None:
        return None
    falling = m.tail_drop is not None and m.tail_drop >= STILL_FALLING
    barely = m.final_loss >= BARELY * m.first_loss
    moved = f"{m.first_loss:.3g} → {m.final_loss:.3g} in {ev.steps} steps"
    if barely and ev.steps >= LONG_ENOUGH and not falling:
        return _Cause(
            "under_fit",
            f"the training loss barely moved ({moved}): the learning rate {ev.learning_rate:g} is too low",
            "higher_lr",
            LR_BOUNDS[1] if m.final_loss >= STUCK * m.first_loss else 3.0,
        )
    if falling:
        return _Cause(
            "under_fit",
            f"the training loss was still falling at the end ({m.tail_drop:.1%} over the last quarter; {moved})",
            "more_steps",
            MAX_STEPS_FACTOR,
        )
    if barely:
        return _Cause(
            "under_fit", f"the training loss barely moved in a short run ({moved})", "more_steps", MAX_STEPS_FACTOR
        )
    return None


def probe_spread(probes: list[ProbePoint]) -> tuple[float | None, float | None]:
    """(best held-out loss, relative spread) of the probes at the longest step that three or more
    stable probes reached (successive halving stops most probes at its early rungs)."""
    stable = [p for p in probes if not p.unstable]
    for s in sorted({s for p in stable for s in p.values}, reverse=True):
        at = [p.values[s] for p in stable if _finite(p.values.get(s)) is not None]
        if len(at) >= 3:
            return min(at), _ratio(max(at) - min(at), min(at))
    return None, None


def _bounded(ev: GateEvidence, m: Measured, cause: _Cause) -> RetryPlan:
    """The plan for the cause's action, inside the bounds; ``stop`` when they leave nothing that helps."""
    if cause.action in ("stop", "more_data"):
        why = (
            "retraining on the same rows cannot help: more (or less duplicated) training rows are needed"
            if cause.action == "more_data"
            else f"retraining cannot help ({cause.kind.replace('_', '-')})"
        )
        return RetryPlan(action=cause.action, stage=ev.stage, reason=why)
    if cause.action in ("lower_lr", "higher_lr"):
        if m.affordable_steps is not None and m.affordable_steps < ev.max_steps:
            return _no_budget(ev, m)
        lo, hi = LR_BOUNDS
        factor = min(hi, max(lo, cause.factor))
        lr = float(f"{ev.learning_rate * factor:.3g}")
        return RetryPlan(
            action=cause.action,
            stage=ev.stage,
            changes=ConfigChanges(learning_rate=lr),
            reason=f"{factor:g}× the attempt's learning rate {ev.learning_rate:g}",
        )
    return _steps_plan(ev, m, cause)


def _steps_plan(ev: GateEvidence, m: Measured, cause: _Cause) -> RetryPlan:
    base, factor = ev.max_steps, cause.factor
    earlier_best = _best_earlier_steps(ev)
    if cause.action == "fewer_steps" and earlier_best is not None:
        factor = earlier_best / base  # the earlier attempt's length, where held-out loss was lower
    if cause.action == "more_steps" and m.affordable_steps is not None:
        factor = min(factor, m.affordable_steps / base)
        if factor < 1.25:
            return _no_budget(ev, m)
    factor = min(factor, MAX_STEPS_FACTOR)
    if ev.num_train_epochs is not None:
        epochs = round(ev.num_train_epochs * factor, 3)
        changes = ConfigChanges(num_train_epochs=epochs)
    else:
        steps = max(1, round(base * factor))
        warmup = steps // 10 if ev.warmup_steps > steps // 4 else None  # over a quarter of the run: cut to a tenth
        changes = ConfigChanges(max_steps=steps, warmup_steps=warmup)
    if m.affordable_steps is not None and m.affordable_steps < base * factor:
        return _no_budget(ev, m)
    bounded = m.affordable_steps is not None and m.affordable_steps < cause.factor * base
    bound = f" (the budget left allows {m.affordable_steps} steps)" if bounded else ""
    if cause.action == "fewer_steps" and earlier_best is not None:
        why = f"the earlier attempt's {earlier_best} steps, where held-out loss was lower"
    else:
        why = f"{factor:.3g}× the attempt's " + ("epochs" if ev.num_train_epochs is not None else f"{base} steps")
    return RetryPlan(action=cause.action, stage=ev.stage, changes=changes, reason=why + bound)


def _best_earlier_steps(ev: GateEvidence) -> int | None:
    """The step count of an earlier, shorter attempt whose held-out loss was lower than this one's."""
    here = _finite(ev.heldout_loss)
    better = [
        (loss, a.steps)
        for a in ev.earlier
        if here is not None
        and (loss := _finite(a.heldout_loss)) is not None
        and loss < here
        and 0 < a.steps < ev.max_steps
    ]
    return min(better, key=lambda b: b[0])[1] if better else None


def _no_budget(ev: GateEvidence, m: Measured) -> RetryPlan:
    return RetryPlan(
        action="stop",
        stage=ev.stage,
        reason=f"the budget left allows {m.affordable_steps} steps of {ev.stage} at "
        f"{ev.seconds_per_step:.3g} s a step: too few for a retry that changes the outcome",
    )


def check_diagnosis(d: Diagnosis, ev: GateEvidence) -> str | None:
    """Why a proposed diagnosis is out of bounds (None: within them): a data or ceiling cause
    retrains nothing, and its plan keeps the bounds (``check_plan``)."""
    if d.kind in ("data", "ceiling", "measurement") and d.plan.retrains:
        return f"plan.action {d.plan.action}: a {d.kind} cause is not fixed by retraining on the same rows"
    return check_plan(d.plan, ev)


def check_plan(plan: RetryPlan, ev: GateEvidence) -> str | None:
    """Why ``plan`` is out of bounds for this attempt (None: within them). Bounds any proposer."""
    if plan.stage != ev.stage:
        return f"plan.stage {plan.stage!r}: the failed gate judged stage {ev.stage!r}"
    ch = plan.changes
    if not plan.retrains:
        return "plan.changes: a plan that does not retrain changes nothing" if ch.given() else None
    if not ch.given():
        return f"plan.changes: {plan.action} with no change retrains the same run (seeded: the same result)"
    lo, hi = LR_BOUNDS
    if ch.learning_rate is not None and not (
        lo * ev.learning_rate * 0.999 <= ch.learning_rate <= hi * ev.learning_rate * 1.001
    ):
        return (
            f"plan.changes.learning_rate {ch.learning_rate:g}: outside {lo:g}×–{hi:g}× of the attempt's "
            f"{ev.learning_rate:g}"
        )
    if ch.max_steps is not None:
        if ch.max_steps > MAX_STEPS_FACTOR * ev.max_steps:
            return f"plan.changes.max_steps {ch.max_steps}: over {MAX_STEPS_FACTOR:g}× the attempt's {ev.max_steps}"
        afford = affordable_steps(ev)
        if afford is not None and ch.max_steps > afford:
            return f"plan.changes.max_steps {ch.max_steps}: the budget left allows {afford} steps"
    if (
        ch.num_train_epochs is not None
        and ev.num_train_epochs is not None
        and ch.num_train_epochs > MAX_STEPS_FACTOR * ev.num_train_epochs
    ):
        return (
            f"plan.changes.num_train_epochs {ch.num_train_epochs:g}: over {MAX_STEPS_FACTOR:g}× the attempt's "
            f"{ev.num_train_epochs:g}"
        )
    return _agrees(plan, ev)


def _agrees(plan: RetryPlan, ev: GateEvidence) -> str | None:
    """The action says which way the changes go."""
    ch, a = plan.changes, plan.action
    steps = ch.max_steps or ev.max_steps
    lr = ch.learning_rate or ev.learning_rate
    new_epochs, old_epochs = ch.num_train_epochs, ev.num_train_epochs
    if new_epochs is not None and old_epochs is not None:
        more, fewer = new_epochs > old_epochs, new_epochs < old_epochs
    else:
        more, fewer = steps > ev.max_steps, steps < ev.max_steps
    wrong = (
        (a == "more_steps" and not more)
        or (a == "fewer_steps" and not fewer)
        or (a == "lower_lr" and lr >= ev.learning_rate)
        or (a == "higher_lr" and lr <= ev.learning_rate)
    )
    return f"plan.action {a}: its changes {ch.given()} do not go that way" if wrong else None
