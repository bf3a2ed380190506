"""Numbers as small inline SVG curves: a sparkline of numeric evidence, and a curve with one point marked
(a spike's loss on the approvals page)."""

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


def marked_curve(pts: Sequence[tuple[float, float]], mark: float | None, width: int = 420, height: int = 150) -> Markup:
    """A curve with its axes' ends labelled and the point at x ``mark`` circled in red behind a dashed
    line (the approvals page draws a spike's loss this way); only numbers reach the markup."""
    pts = [(float(x), float(y)) for x, y in pts if math.isfinite(x) and math.isfinite(y)]
    if not pts:
        return Markup("")
    pad_l, pad_r, pad_t, pad_b = 52, 10, 10, 22
    xs, ys = [p[0] for p in pts], [p[1] for p in pts]
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    sx = (width - pad_l - pad_r) / ((x1 - x0) or 1.0)
    sy = (height - pad_t - pad_b) / ((y1 - y0) or 1.0)

    def at(x: float, y: float) -> tuple[float, float]:
        return pad_l + (x - x0) * sx, height - pad_b - (y - y0) * sy

    path = " ".join("{:.1f},{:.1f}".format(*at(x, y)) for x, y in pts)
    dots = "".join('<circle cx="{:.1f}" cy="{:.1f}" r="2"/>'.format(*at(x, y)) for x, y in pts)
    parts = [
        f'<svg class="marked-curve" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img"',
        f' aria-label="{len(pts)} points, steps {x0:g} to {x1:g}">',
        f'<g class="axes" font-size="10"><text x="{pad_l - 4}" y="{pad_t + 8}" text-anchor="end">{y1:.4g}</text>',
        f'<text x="{pad_l - 4}" y="{height - pad_b}" text-anchor="end">{y0:.4g}</text>',
        f'<text x="{pad_l}" y="{height - 6}">step {x0:g}</text>',
        f'<text x="{width - pad_r}" y="{height - 6}" text-anchor="end">{x1:g}</text>',
        f'<line x1="{pad_l}" y1="{height - pad_b}" x2="{width - pad_r}" y2="{height - pad_b}" stroke="#94a3b8"/>',
        f'<line x1="{pad_l}" y1="{pad_t}" x2="{pad_l}" y2="{height - pad_b}" stroke="#94a3b8"/></g>',
        f'<polyline fill="none" stroke="#1d4ed8" stroke-width="1.5" points="{path}"/>',
        f'<g class="points" fill="#1d4ed8">{dots}</g>',
    ]
    marked = [(x, y) for x, y in pts if mark is not None and x == float(mark)]
    if marked:
        mx, my = at(*marked[0])
        parts += [
            f'<g class="mark" data-x="{marked[0][0]:g}" data-y="{marked[0][1]:.6g}">',
            f'<line x1="{mx:.1f}" y1="{pad_t}" x2="{mx:.1f}" y2="{height - pad_b}" stroke="#dc2626" '
            'stroke-dasharray="4 3"/>',
            f'<circle cx="{mx:.1f}" cy="{my:.1f}" r="5" fill="none" stroke="#dc2626" stroke-width="2"/>',
            f'<text x="{mx + 6 if mx < width / 2 else mx - 6:.1f}" y="{pad_t + 10}" fill="#dc2626" font-size="11" '
            f'text-anchor="{"start" if mx < width / 2 else "end"}">spike at {marked[0][0]:g}: '
            f"{marked[0][1]:.4g}</text></g>",
        ]
    return Markup("".join(parts) + "</svg>")
