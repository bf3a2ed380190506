"""A list of numbers as a small inline SVG curve (the approvals page draws numeric evidence with it)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from markupsafe import Markup


def is_curve(value: object) -> bool:
    """A list of at least two numbers, or of [step, number] pairs."""
    return isinstance(value, list) and len(value) >= 2 and len(points(value)) == len(value)


def points(value: Sequence) -> list[tuple[float, float]]:
    out = []
    for i, item in enumerate(value):
        if _number(item):
            out.append((float(i), float(item)))
        elif isinstance(item, (list, tuple)) and len(item) == 2 and _number(item[0]) and _number(item[1]):
            out.append((float(item[0]), float(item[1])))
    return [(x, y) for x, y in out if math.isfinite(x) and math.isfinite(y)]


def _number(v: object) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def sparkline(value: Sequence, width: int = 240, height: int = 60) -> Markup:
    """The curve with its first and last values and its range; only numbers reach the markup."""
    pts = points(value)
    if len(pts) < 2:
        return Markup("")
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = (width - 4) / ((x1 - x0) or 1.0)
    sy = (height - 4) / ((y1 - y0) or 1.0)
    path = " ".join(f"{2 + (x - x0) * sx:.1f},{height - 2 - (y - y0) * sy:.1f}" for x, y in pts)
    title = f"{len(pts)} points, {ys[0]:.4g} → {ys[-1]:.4g} (min {y0:.4g}, max {y1:.4g})"
    return Markup(
        f'<svg class="sparkline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="{title}"><title>{title}</title>'
        f'<polyline fill="none" stroke="currentColor" stroke-width="1.5" points="{path}"/></svg>'
        f'<span class="range">{title}</span>'
    )
