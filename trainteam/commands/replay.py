"""`trainteam replay RUN [--execute]`: a past run step by step, or re-run from its recorded model responses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from trainteam.commands.common import console, print_json, workspace
from trainteam.core.errors import BadInput


def _short(value: Any, width: int = 160) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= width else text[: width - 1] + "…"


def _show(steps: list[dict], instructions: bool = False) -> None:
    for s in steps:
        console.print(
            f"[bold]{s['segment']}[/bold] [cyan]{s['persona']}[/cyan] [dim]({s['model']}, "
            f"{s['status']}, {s.get('seconds') or 0:.1f}s)[/dim]",
            highlight=False,
        )
        if instructions:
            console.print(
                "  instructions:\n    " + s["instructions"].strip().replace("\n", "\n    "),
                highlight=False,
                markup=False,
            )
        console.print(f"  prompt: {s['prompt']}", highlight=False, markup=False)
        if s["skills"]:
            console.print(f"  skills: {', '.join(s['skills'])}", highlight=False, markup=False)
        for c in s["calls"]:
            console.print(f"  → {c['tool']}({_short(c['args'], 120)})", highlight=False, markup=False)
            if c.get("result") is not None:
                console.print(f"    ← {_short(c['result'])}", highlight=False, markup=False)
        for a in s["approvals"]:
            verdict = "approved" if a.get("approved") else "rejected"
            console.print(
                f"  ⏸ {a['tool_name']} {verdict} by a person" + (f": {a['note']}" if a.get("note") else ""),
                highlight=False,
                markup=False,
            )
        if s["decision"]:
            d = s["decision"]
            console.print(
                f"  decision: {d.get('decision')} — {_short(d.get('summary', ''))}", highlight=False, markup=False
            )
        if s.get("error"):
            console.print(f"  [red]error:[/red] {s['error']}", highlight=False)


def replay_command(
    run_id: str = typer.Argument(..., help="the run whose transcripts to show"),
    execute: bool = typer.Option(
        False,
        "--execute",
        help="re-run it in a fresh workspace from the recorded model responses and report any difference",
    ),
    into: Path | None = typer.Option(
        None, "--into", help="with --execute: the fresh workspace (default: a new temporary folder)"
    ),
    instructions: bool = typer.Option(False, "--instructions", help="also print each persona's rendered brief"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Show a past run step by step (persona, prompt, tool calls, results, decisions, approvals)."""
    from trainteam.agents.replay import replay_run, steps_of

    ws = workspace()
    if not execute:
        steps = steps_of(ws, run_id)
        return print_json(steps) if as_json else _show(steps, instructions)
    import tempfile

    from trainteam.workspace import Workspace

    if into is not None and into.exists() and any(into.iterdir()):
        raise BadInput(f"--into: {into} is not empty; replay needs a fresh workspace")
    steps_of(ws, run_id)  # a missing run fails here, before a folder is made
    dest = Workspace.open(into or Path(tempfile.mkdtemp(prefix=f"replay-{run_id}-")))
    from trainteam.contract.train_task import TrainTask
    from trainteam.workflows.steps import STEPS

    report = replay_run(ws, run_id, dest, STEPS, TrainTask.model_validate)
    if as_json:
        print_json(
            {
                **report.model_dump(mode="json"),
                "identical": report.identical,
                "same": {s.segment: s.same for s in report.steps},
            }
        )
    else:
        for s in report.steps:
            mark = "[green]same[/green]" if s.same else "[red]DIFFERENT[/red]"
            console.print(f"{s.segment} ({s.persona}): {mark} — {len(s.replayed_calls)} tool calls", highlight=False)
            if s.recorded_calls != s.replayed_calls:
                console.print(
                    f"  recorded: {_short(s.recorded_calls)}\n  replayed: {_short(s.replayed_calls)}",
                    highlight=False,
                    markup=False,
                )
            for name, (old, new) in s.hash_differences.items():
                console.print(f"  artifact {name}: {old} → {new}", highlight=False, markup=False)
            if s.error:
                console.print(f"  error: {s.error}", highlight=False, markup=False)
        verdict = "identical" if report.identical else "DIFFERENT"
        console.print(f"replay of {run_id} in {report.workspace}: [bold]{verdict}[/bold]", highlight=False)
    raise typer.Exit(0 if report.identical else 1)


def register(app: typer.Typer) -> None:
    app.command("replay")(replay_command)
