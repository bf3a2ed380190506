"""A stage's gate as the judge decides it: the task's rules or a default, never a pass on nothing (pure; no torch).

Two ways a gate used to pass without having seen anything, both on a user's real task:

- a stage the task named no gate for was promoted ("no gate rules for stage sft in the task");
- a rule on a metric that read 0 for every model passed (``exact_match did not regress (0 -> 0)``):
  the answers had been cut at 8 new tokens, the metric was blind, and the model was registered.

Which metrics judge a stage's answers follows from the references (``answer_style``): exact answers (one right
string a row) by exact match, free-form ones (replies, summaries, rewrites) by answer-only held-out loss, ROUGE-L,
chrF and the form check (``judged_rules``); exact match is reported there and never gates.

So every stage is judged against what it started from (``StageInput``: the base model measured once,
the stage before it, or a random init's known loss), with a default when the task names no rule
(``default_rules``): a training stage must beat its input beyond noise on the held-out metric — exact
match where answers are checked (post-training), held-out loss otherwise (pre-training kinds, text
rows) — and an align stage must not fall below it; format adherence may never fall beyond noise. And a
checked answer metric never passes on nothing (``measurement_checks``): an answer check that cannot score
its own references right is a measurement failure (the judge's diagnosis says ``measurement``, plans no
retrain, and the run stops or asks a person), and one that reads the same for the input and the trained
model (0 and 0, say) while the held-out loss fell fails the gate too, for the judge to diagnose.

Noise: on a rate measured on n rows, two binomial standard errors of the input's rate and at least two
rows' worth (2/n): 60 held-out rows at 1.7 % right → 0.05; on held-out loss 1 % of the input's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from pydantic import BaseModel, Field

from trainteam.trainers.evaluation.answer_style import AnswerStyle
from trainteam.trainers.evaluation.gates import GateCheck, GateDecision, GateRule, evaluate_gate
from trainteam.trainers.evaluation.metrics.metric_registry import METRICS
from trainteam.trainers.evaluation.metrics.metric_spec import loss_band, rate_band
from trainteam.trainers.methods.method_registry import align_methods

# read from generated answers: blind when cut or mis-checked
ANSWER_METRICS = ("exact_match", "format_adherence", "rouge_l", "chrf", "form_rate")
PRETRAIN_KINDS = ("pretrain", "mid_train", "long_context")
HELD = ("format_adherence", "chrf")  # judged metrics that must not fall beyond noise (the others must gain)
# Judged metrics whose gain must also close this share of the input's distance to the top. The form rate: a
# bar of noise alone (base 0 + 2/60) passed a model that had learnt a house style's phrases and copied 6 of 60
# replies whole (tests/evaluation/test_freeform_judging.py); a model that learnt the task holds the form on
# (nearly) every row (the issue's: 60 of 60).
HEADROOM = {"form_rate": 0.5}


class StageInput(BaseModel):
    """What a stage started from, as its gate compares against it."""

    name: str = Field(description="base (the task's model, measured), random init, or the stage before")
    metrics: dict[str, float] = Field(default_factory=dict)
    measured: bool = Field(
        default=True,
        description="false: a reference value, not a measurement "
        "(a random init's held-out loss is ln(vocabulary), its exact match 0)",
    )

    def shown(self, metric: str) -> str:
        v = self.metrics.get(metric)
        return "n/a" if v is None else f"{v:.3g}"


def random_init(vocab_size: int) -> StageInput:
    """A model built from its config: uniform over the vocabulary, nothing right."""
    return StageInput(
        name="random init",
        measured=False,
        metrics={"heldout_loss": math.log(max(vocab_size, 2)), "exact_match": 0.0, "format_adherence": 0.0},
    )


def _measured(metric: str, metrics: Mapping[str, float], before: StageInput) -> bool:
    return metric in metrics and metric in before.metrics


def default_rules(
    kind: str,
    method: str,
    metrics: Mapping[str, float],
    before: StageInput,
    n_eval: int | None,
    style: AnswerStyle | None = None,
) -> list[tuple[GateRule, str]]:
    """The gate of a stage the task names none for, each rule with where its bar came from: beat the input
    beyond noise (an align stage: do not fall below it) on exact match where answers are checked after
    pre-training, else on held-out loss; format adherence never falls beyond noise. Free-form answers, or
    metrics the task names (``style``), are judged by ``judged_rules`` instead: exact match never gates them."""
    aligning = method in align_methods()
    if style is not None and kind not in PRETRAIN_KINDS and (style.free_form or style.named):
        return judged_rules(style.judged_by, metrics, before, n_eval, aligning)
    rules: list[tuple[GateRule, str]] = []
    if kind not in PRETRAIN_KINDS and _measured("exact_match", metrics, before):
        q = before.metrics["exact_match"]
        band = rate_band(q, n_eval)
        if aligning or q >= 1 - band:  # an align stage, or an input already at the top: hold it
            rules.append((GateRule(metric="exact_match", max_regression=band), f"noise {band:.3g}"))
        else:
            rules.append(
                (GateRule(metric="exact_match", min=min(1.0, q + band)), f"{before.name} {q:.3g} + noise {band:.3g}")
            )
    elif _measured("heldout_loss", metrics, before):
        loss = before.metrics["heldout_loss"]
        band = loss_band(loss)
        if aligning:
            rules.append((GateRule(metric="heldout_loss", max_regression=10 * band), f"10 x noise {band:.3g}"))
        else:
            rules.append(
                (GateRule(metric="heldout_loss", max=loss - band), f"{before.name} {loss:.4g} - noise {band:.3g}")
            )
    if _measured("format_adherence", metrics, before):
        band = rate_band(before.metrics["format_adherence"], n_eval)
        rules.append((GateRule(metric="format_adherence", max_regression=band), f"noise {band:.3g}"))
    return rules


def judged_rules(
    judged_by: list[str], metrics: Mapping[str, float], before: StageInput, n_eval: int | None, aligning: bool
) -> list[tuple[GateRule, str]]:
    """One rule for each judging metric both models measured: beat the input beyond the metric's noise band
    (the registry's: a loss 1 %, a rate two binomial errors, ROUGE-L or chrF two bootstrap errors of the
    input's mean), or, for an align stage, an input already within a band of the top, or a metric that is
    only held (``HELD``: format adherence, chrF), do not fall beyond it. The form rate must gain, and close half
    its distance to the top (``HEADROOM``): a model that learnt a house style's phrases but not its facts reads
    well and is wrong."""
    rules: list[tuple[GateRule, str]] = []
    for name in judged_by:
        spec = METRICS.get(name)
        if spec is None or not _measured(name, metrics, before):
            continue
        was = before.metrics[name]
        band = spec.band(was, n_eval, before.metrics.get(f"{name}_se"))
        top = spec.high if spec.higher_is_better else spec.low
        at_top = top is not None and abs(top - was) <= band
        if aligning or at_top or name in HELD:
            scale = 10 if aligning and spec.noise == "loss" else 1
            rules.append((GateRule(metric=name, max_regression=scale * band), f"noise {scale * band:.3g}"))
        elif spec.higher_is_better:
            gain = max(band, HEADROOM.get(name, 0.0) * ((spec.high or 1.0) - was))
            bar = min(spec.high if spec.high is not None else math.inf, was + gain)
            why = f"noise {band:.3g}" if gain == band else f"half its distance to the top, beyond noise {band:.3g}"
            rules.append((GateRule(metric=name, min=bar), f"{before.name} {was:.3g} + {why}"))
        else:
            bar = max(spec.low, was - band)
            rules.append((GateRule(metric=name, max=bar), f"{before.name} {was:.4g} - noise {band:.3g}"))
    return rules


BLIND_BELOW = 0.95  # reference_match under this: the answer check misses its own references


def measurement_checks(metrics: Mapping[str, float], before: StageInput, checked: set[str]) -> list[GateCheck]:
    """Failing checks for the checked answer metrics that cannot judge this stage:

    - ``measurement``: the answer check is blind — it scores fewer than ``BLIND_BELOW`` of the held-out
      references right when they are written exactly as a model would write them (``reference_match``: an
      answer cut short, a rule that never matches); no model's score on it means anything;
    - ``unchanged``: the metric reads the same for the input and the trained model (below the top) while the
      held-out loss fell beyond noise (format adherence: 0 for both). The check can see a right answer, so the
      model has not learnt to give one yet: the gate cannot pass on it, and the judge's diagnosis says why."""
    answer_metrics = [m for m in ANSWER_METRICS if m in checked and m in metrics]
    seen = metrics.get("reference_match")
    if answer_metrics and seen is not None and seen < BLIND_BELOW:
        return [
            GateCheck(
                metric=m,
                kind="measurement",
                value=metrics[m],
                threshold=BLIND_BELOW,
                passed=False,
                reason=f"measurement failure: the answer check scores only {seen:.0%} of the held-out "
                f"references right when a model writes them exactly: {m} cannot see a right answer "
                "(answers cut short? an answer rule that never matches?)",
            )
            for m in answer_metrics
        ]
    loss, was = metrics.get("heldout_loss"), before.metrics.get("heldout_loss")
    if loss is None or was is None or not loss < was - loss_band(was):
        return []
    out = []
    for m in answer_metrics:
        value, prev = metrics[m], before.metrics.get(m)
        if prev is not None and value == prev and (value == 0.0 if m == "format_adherence" else value < 1.0):
            out.append(
                GateCheck(
                    metric=m,
                    kind="unchanged",
                    value=value,
                    threshold=prev,
                    previous=prev,
                    passed=False,
                    reason=f"{m} reads {value:.3g} for {before.name} and for the trained model while "
                    f"held-out loss fell {was:.3g} -> {loss:.3g}: no evidence the model answers "
                    f"better (the check scores its references right, so it has not learnt to)",
                )
            )
    return out


def judge_stage(
    stage: str,
    kind: str,
    method: str,
    metrics: Mapping[str, float],
    rules: list,
    before: StageInput,
    n_eval: int | None,
    previous_stage: str | None = None,
    style: AnswerStyle | None = None,
) -> GateDecision:
    """The stage's gate: the task's ``rules`` (or ``default_rules``, by the answers' ``style``) against
    ``before``, plus the measurement checks; ``previous_stage`` names ``before`` in the reasons (default: its
    name)."""
    own = list(rules)
    defaults = [] if own else default_rules(kind, method, metrics, before, n_eval, style)
    where = previous_stage or before.name
    decision = evaluate_gate(
        stage, metrics, own or [r for r, _ in defaults], previous=before.metrics, previous_stage=where
    )
    reasons = list(decision.reasons)
    if defaults:  # one check per bound; each default rule sets one bound
        notes = [note for _, note in defaults]
        reasons = [f"default gate (the task names none): {r} ({n})" for r, n in zip(reasons, notes, strict=True)]
    extra = measurement_checks(metrics, before, {c.metric for c in decision.checks})
    checks = list(decision.checks) + extra
    return decision.model_copy(
        update={
            "checks": checks,
            "reasons": reasons + [c.reason for c in extra],
            "passed": all(c.passed for c in checks),
        }
    )


DEFAULT = "the default (the task names none): "


def gate_text(kind: str, method: str, rules: list, style: AnswerStyle | None) -> str:
    """The gate a stage will meet, in words, before anything runs: the task's rules, or the default that
    ``default_rules`` will build (its bars come from the input's measured values, known only in the run)."""
    if rules:
        return "the task's: " + "; ".join(_rule_text(r) for r in rules)
    aligning = method in align_methods()
    if kind in PRETRAIN_KINDS or (style is not None and style.kind == "text"):
        want = "not above the input's by 10x its noise" if aligning else "below the input's beyond noise (1 %)"
        return f"{DEFAULT}heldout_loss {want}"
    if style is not None and (style.free_form or style.named):
        parts = [_judged_text(name, aligning) for name in style.judged_by if name in METRICS]
        never = style.free_form and "exact_match" not in style.judged_by
        tail = "; exact_match reported, never gating" if never else ""
        return f"{DEFAULT}{', '.join(parts)}{tail} (an input within noise of the top: held)"
    held = "format_adherence not falling beyond noise"
    if aligning:
        return f"{DEFAULT}exact_match not falling beyond noise, {held}"
    return f"{DEFAULT}exact_match above the input's beyond noise (two binomial errors; at the top: held), {held}"


def _judged_text(name: str, aligning: bool) -> str:
    if aligning or name in HELD:
        return f"{name} not falling beyond noise"
    return f"{name} {'above' if METRICS[name].higher_is_better else 'below'} the input's beyond noise"


def _rule_text(rule) -> str:
    parts = [f"{rule.metric} >= {rule.min:g}"] if rule.min is not None else []
    parts += [f"{rule.metric} <= {rule.max:g}"] if rule.max is not None else []
    parts += [f"{rule.metric} drop <= {rule.max_regression:g}"] if rule.max_regression is not None else []
    return " and ".join(parts)
