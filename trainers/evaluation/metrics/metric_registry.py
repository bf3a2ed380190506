"""The registry of metrics: every ``MetricSpec`` declared by a file of this folder (its ``METRICS``).

Ask it instead of naming a metric's properties: ``get_metric(name).higher_is_better``, ``.band(...)``,
``check_metric(name, min=...)``. Adding a metric is one file here (its ``METRICS`` record, and its ``score``
when it reads generated answers) and a test; nothing else changes: the battery computes every registered
answer metric a stage asks for, gate rules and ``eval.metrics`` accept it, the report shows it.

``lm_eval/<task>/<metric>`` names the harness's results; they are not registered (the harness declares its
own), so their direction is the harness's convention read from the name (lower for loss/perplexity).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType

from trainteam.core.errors import BadInput
from trainteam.trainers.evaluation import metrics as _package
from trainteam.trainers.evaluation.metrics.metric_spec import MetricSpec

_OWN = {"metric_spec", "metric_registry"}
_LOWER_HARNESS = ("loss", "perplexity", "ppl", "error")


def load(package: ModuleType = _package) -> dict[str, MetricSpec]:
    """Every ``MetricSpec`` the modules of ``package`` declare (their ``METRICS``), by name."""
    found: dict[str, MetricSpec] = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda m: m.name):
        if info.name in _OWN:
            continue
        module = importlib.import_module(f"{package.__name__}.{info.name}")
        for spec in getattr(module, "METRICS", ()):
            if not isinstance(spec, MetricSpec):
                raise TypeError(f"metrics/{info.name}.py: METRICS holds {spec!r}, not a MetricSpec")
            if spec.name in found:
                raise TypeError(f"metrics/{info.name}.py: metric {spec.name!r} is declared twice")
            found[spec.name] = spec
    return found


METRICS: dict[str, MetricSpec] = load()


def harness_metric(name: str) -> bool:
    return name.startswith("lm_eval/") and name.count("/") == 2


def known() -> str:
    return ", ".join(METRICS) + ", or lm_eval/<task>/<metric>"


def get_metric(name: str) -> MetricSpec:
    """The metric called ``name``; BadInput naming the known ones otherwise."""
    try:
        return METRICS[name]
    except KeyError:
        raise BadInput(f"metric {name!r} is not measured by any eval (one of {known()})") from None


def answer_metrics() -> list[MetricSpec]:
    """The metrics scored from generated answers (their ``score``), in registry order."""
    return [m for m in METRICS.values() if m.score is not None]


def higher_is_better(name: str) -> bool:
    if harness_metric(name):
        return not any(k in name.lower() for k in _LOWER_HARNESS)
    return get_metric(name).higher_is_better


def check_metric(metric: str, **bounds: float | None) -> None:
    """ValueError unless ``metric`` is one an eval measures and every bound (``min=…``) lies in its range:
    a gate on a metric nothing measures, or ``exact_match >= 2``, could never pass, and would only fail after
    hours of training."""
    if harness_metric(metric):
        return
    if metric not in METRICS:
        raise ValueError(f"metric {metric!r} is not measured by any eval (one of {known()})")
    spec = METRICS[metric]
    for name, b in bounds.items():
        if b is not None and (b < spec.low or (spec.high is not None and b > spec.high)):
            raise ValueError(
                f"{name} {b:g}: {metric} lies in [{spec.low:g}, {'inf' if spec.high is None else f'{spec.high:g}'}], "
                "so the gate could never be decided by it"
            )


def check_names(names: Iterable[str], where: str) -> list[str]:
    """``names`` if every one is a registered metric (or a harness result); ValueError naming ``where``."""
    out = list(names)
    for n in out:
        if not harness_metric(n) and n not in METRICS:
            raise ValueError(f"{where}: unknown metric {n!r} (one of {known()})")
    return out
