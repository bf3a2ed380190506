"""`approvals show` for people: an approval and its evidence as readable sections (rich).

Reads the typed view (``workflows.evidence.ApprovalView``); ``--json`` prints the stored row instead.
Imported by ``approvals show`` when it prints (rich: not for ``approvals list --json`` or ``--help``).
"""

from __future__ import annotations

import json
from typing import Any

from rich.markup import escape
from rich.table import Table

_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float]) -> str:
    """The values as one line of block characters, lowest ▁ to highest █."""
    if not values:
        return ""
    lo, hi = min(values), max(values)
    span = (hi - lo) or 1.0
    return "".join(_BARS[min(len(_BARS) - 1, int((v - lo) / span * (len(_BARS) - 1) + 0.5))] for v in values)


def _num(v: Any) -> str:
    return _e(f"{v:.4g}" if isinstance(v, float) else str(v))


def _e(text: Any) -> str:
    """Stored text printed as itself, never as rich markup."""
    return escape(str(text))


def _header(console, view) -> None:
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    rows = [
        ("approval", f"{view.short_id}  ({view.id})"),
        ("action", view.action),
        ("status", view.status),
        ("run", view.run_id),
        ("step", view.step),
        ("asked by", view.requested_by),
        ("asked at", view.created_at),
    ]
    if view.decided_by:
        rows += [("decided by", view.decided_by), ("decided at", view.decided_at or "")]
    if view.note:
        rows.append(("note", view.note))
    for k, v in rows:
        t.add_row(k, _e(v))
    console.print(t)


def _register(console, ev) -> None:
    test = ev.test_metrics
    metrics = Table(
        "metric",
        "dev (the gates read)",
        *(["sealed test (the figure to trust)"] if test else []),
        title=f"metrics of the weights to register ({ev.stage or '?'})",
        title_justify="left",
    )
    for k, v in sorted(ev.metrics.items()):
        metrics.add_row(_e(k), _num(v), *([_num(test[k]) if k in test else ""] if test else []))
    console.print(metrics)
    gates = Table("gate", "stage", "verdict", "why", title="gates", title_justify="left")
    for g in ev.gates:
        verdict = (
            "[green]pass[/green]" if g.passed else ("[yellow]accepted[/yellow]" if g.promoted else "[red]fail[/red]")
        )
        gates.add_row(_e(g.step), _e(g.stage or ""), verdict, _e("; ".join(g.reasons)))
    console.print(gates)
    if ev.checkpoint is not None:
        console.print(f"[bold]checkpoint[/bold] {_e(ev.checkpoint.path)}", highlight=False)
        console.print(f"  weights hash {ev.checkpoint.weights_hash}", highlight=False)
        for f in ev.checkpoint.files:
            console.print(f"  {_e(f.name)}  sha256 {f.sha256}  ({f.bytes:,} bytes)", highlight=False)
    if ev.lineage is not None:
        console.print("[bold]lineage[/bold] (from the knowledge graph)", highlight=False)
        for n in ev.lineage.of_kind("Corpus", "DatasetVersion", "Tokenizer", "Checkpoint", "Run"):
            console.print(_e(f"  {n.kind:<15} {n.id}" + (f"  {n.path}" if n.path else "")), highlight=False)


def _spike(console, ev) -> None:
    console.print(
        f"[bold]loss spike[/bold] in {_e(ev.stage or '?')} at step {ev.spike_step}: {_e(ev.metric)} "
        f"{_num(ev.value)} against a window mean of {_num(ev.window_mean)} ± {_num(ev.window_std)}"
        + (f" (z {ev.z:.1f}, rule {_e(ev.rule)})" if ev.z is not None else ""),
        highlight=False,
    )
    if ev.curve:
        console.print(
            f"  curve  {sparkline([p.loss for p in ev.curve])}  steps {ev.curve[0].step}–{ev.curve[-1].step}",
            highlight=False,
        )
        console.print("  " + "  ".join(f"{p.step}:{p.loss:.4g}" for p in ev.curve), highlight=False)
    if ev.earlier_spikes:
        console.print(f"  {ev.earlier_spikes} earlier spike(s) in this step", highlight=False)


def _budget(console, ev) -> None:
    spent = f"{ev.spent_seconds / 60:.1f} min" if ev.spent_seconds is not None else _e(ev.where or "?")
    cost = f", ${ev.spent_usd:.2f}" if ev.spent_usd else ""
    console.print(
        f"[bold]budget[/bold] spent {spent}{cost} of {_num(ev.allowed_minutes)} min allowed"
        f" (task: {_num(ev.max_wall_minutes)} min, ${_num(ev.max_cost_usd)}); "
        f"approving adds {_num(ev.extra_minutes)} min",
        highlight=False,
    )
    if ev.overrun_s is not None:
        console.print(f"  over by {ev.overrun_s:.0f} s", highlight=False)


def render_approval(console, view) -> None:
    """The approval, then its evidence: typed sections first, the rest of the stored evidence after."""
    _header(console, view)
    if view.proposed:
        console.print("[bold]proposed[/bold] " + _e(json.dumps(view.proposed, default=str)), highlight=False)
    for section, show in ((view.registration, _register), (view.spike, _spike), (view.budget, _budget)):
        if section is not None:
            show(console, section)
    typed = {"register_model", "curve", "monitor", "spent", "budget", "allowed_minutes"}
    if view.budget is not None:  # the budget section printed these already
        typed |= {"where", "overrun_s"}
    for key, value in view.evidence.items():
        if key not in typed:
            console.print(
                f"[bold]{_e(key)}[/bold] {_e(value if isinstance(value, str) else json.dumps(value, default=str))}",
                highlight=False,
            )
