"""Gates: may a stage's checkpoint be promoted, judged from its eval metrics (pure; no torch).

A gate is a list of rules from the task, each on a metric of the registry
(``metrics/metric_registry.py``: its direction and range come from there): absolute thresholds (``min`` / ``max``)
and "no regression beyond x against the previous stage". The decision carries
one reason per rule, so a person reading the approval sees exactly why a gate
failed. A failed gate is final for the workflow: only a person can accept it,
through the approval queue (``accept_failed_gate`` takes the queue's decided
record, never a flag an agent could set).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainteam.core.errors import BadInput, format_validation_error
from trainteam.trainers.evaluation.metrics.metric_registry import check_metric, higher_is_better


class GateRule(BaseModel):
    """One rule on one metric. ``min``/``max`` are absolute; ``max_regression`` is the largest
    allowed worsening against the previous stage (in the metric's own units)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    metric: str = "exact_match"
    min: float | None = None
    max: float | None = None
    max_regression: float | None = Field(default=None, ge=0, le=1e6)
    higher_is_better: bool | None = Field(default=None, description="None: the metric registry's direction")

    @model_validator(mode="after")
    def _has_a_test(self) -> GateRule:
        if self.min is None and self.max is None and self.max_regression is None:
            raise ValueError(f"gate rule on {self.metric!r}: give min, max or max_regression")
        check_metric(self.metric, min=self.min, max=self.max)
        if self.min is not None and self.max is not None and self.min > self.max:
            raise ValueError(f"gate rule on {self.metric!r}: min {self.min:g} is above max {self.max:g}")
        return self

    @property
    def higher_better(self) -> bool:
        return higher_is_better(self.metric) if self.higher_is_better is None else self.higher_is_better


class GateCheck(BaseModel):
    metric: str
    kind: Literal["min", "max", "regression", "measurement", "unchanged"]
    value: float | None
    threshold: float
    previous: float | None = None
    passed: bool
    reason: str


class GateDecision(BaseModel):
    """The gate's verdict. ``promote`` is true when it passed or a person accepted the failure."""

    stage: str
    passed: bool
    checks: list[GateCheck]
    reasons: list[str]
    previous_stage: str | None = None
    accepted_by: str | None = None
    approval_id: str | None = None

    @property
    def promote(self) -> bool:
        return self.passed or self.accepted_by is not None

    @property
    def summary(self) -> str:
        head = (
            "passed" if self.passed else ("failed, accepted by " + self.accepted_by if self.accepted_by else "failed")
        )
        return f"gate {self.stage}: {head}: " + "; ".join(self.reasons)


def as_rules(rules: Iterable[Any] | Mapping[str, Any] | Any | None) -> list[GateRule]:
    """Accept GateRule, any pydantic model or dict with the same fields (the task's GateSpec), or a list."""
    if rules is None:
        return []
    if isinstance(rules, (GateRule, BaseModel, dict)):
        rules = [rules]
    out = []
    for i, r in enumerate(rules):
        data = r.model_dump(exclude_none=True) if isinstance(r, BaseModel) else r
        try:
            out.append(r if isinstance(r, GateRule) else GateRule.model_validate(data))
        except ValidationError as exc:  # one line naming the rule
            raise BadInput(format_validation_error(exc, f"gates[{i}]")) from None
    return out


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(f) else f


def evaluate_gate(
    stage: str,
    metrics: Mapping[str, Any],
    rules: Iterable[Any] | Any,
    *,
    previous: Mapping[str, Any] | None = None,
    previous_stage: str | None = None,
) -> GateDecision:
    """Judge ``metrics`` of ``stage`` against ``rules``; ``previous`` holds the prior stage's metrics."""
    checks: list[GateCheck] = []
    for rule in as_rules(rules):
        value = _num(metrics.get(rule.metric))
        missing = f"{rule.metric} was not measured in stage {stage}"
        if rule.min is not None:
            ok = value is not None and value >= rule.min
            checks.append(
                GateCheck(
                    metric=rule.metric,
                    kind="min",
                    value=value,
                    threshold=rule.min,
                    passed=ok,
                    reason=missing
                    if value is None
                    else f"{rule.metric} {value:.4g} {'>=' if ok else '<'} min {rule.min:.4g}",
                )
            )
        if rule.max is not None:
            ok = value is not None and value <= rule.max
            checks.append(
                GateCheck(
                    metric=rule.metric,
                    kind="max",
                    value=value,
                    threshold=rule.max,
                    passed=ok,
                    reason=missing
                    if value is None
                    else f"{rule.metric} {value:.4g} {'<=' if ok else '>'} max {rule.max:.4g}",
                )
            )
        if rule.max_regression is not None:
            checks.append(_regression(rule, stage, value, previous, previous_stage, missing))
    if not checks:
        raise BadInput(f"gate {stage}: no rules to judge (give the stage gates in the task)")
    passed = all(c.passed for c in checks)
    return GateDecision(
        stage=stage, passed=passed, checks=checks, reasons=[c.reason for c in checks], previous_stage=previous_stage
    )


def _regression(
    rule: GateRule,
    stage: str,
    value: float | None,
    previous: Mapping[str, Any] | None,
    previous_stage: str | None,
    missing: str,
) -> GateCheck:
    prev = _num((previous or {}).get(rule.metric))
    limit = float(rule.max_regression or 0.0)
    if prev is None:
        # Nothing to regress from (first stage, or the metric is new here): the rule holds.
        return GateCheck(
            metric=rule.metric,
            kind="regression",
            value=value,
            threshold=limit,
            passed=value is not None,
            reason=missing if value is None else f"{rule.metric}: no previous stage value to compare",
        )
    if value is None:
        return GateCheck(
            metric=rule.metric,
            kind="regression",
            value=None,
            threshold=limit,
            previous=prev,
            passed=False,
            reason=missing,
        )
    drop = (prev - value) if rule.higher_better else (value - prev)
    ok = drop <= limit + 1e-12
    where = previous_stage or "previous stage"
    verb = "dropped" if rule.higher_better else "rose"
    reason = (
        (
            f"{rule.metric} {verb} {abs(drop):.4g} against {where} ({prev:.4g} -> {value:.4g}), "
            f"{'within' if ok else 'beyond'} allowed {limit:.4g}"
        )
        if drop > 0
        else (f"{rule.metric} did not regress against {where} ({prev:.4g} -> {value:.4g})")
    )
    return GateCheck(
        metric=rule.metric, kind="regression", value=value, threshold=limit, previous=prev, passed=ok, reason=reason
    )


def accept_failed_gate(decision: GateDecision, approval: Mapping[str, Any]) -> GateDecision:
    """A person's acceptance of a failed gate, from the approval queue's decided record
    (``{"id", "status", "decided_by", ...}``). Anything but an approved, person-decided record
    is refused: a failed gate never turns into a promotion by itself."""
    if decision.passed:
        return decision
    status, person = approval.get("status"), approval.get("decided_by")
    if status != "approved" or not person:
        raise BadInput(
            f"approval {approval.get('id')!r}: a failed gate needs an approved decision by a person (status {status!r})"
        )
    return decision.model_copy(update={"accepted_by": str(person), "approval_id": approval.get("id")})
