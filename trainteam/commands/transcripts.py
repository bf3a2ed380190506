"""`trainteam transcripts list|export`: the team's recorded agent runs, and SFT data made from them."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from trainteam.commands.common import console, print_json, workspace
from trainteam.core.errors import BadInput

transcripts_app = typer.Typer(help="Recorded agent runs (redacted pydantic-ai messages).", no_args_is_help=True)


@transcripts_app.command("list")
def list_(
    run: str | None = typer.Option(None, "--run", help="only this run"), as_json: bool = typer.Option(False, "--json")
) -> None:
    from trainteam.agents import transcripts

    ws = workspace()
    ids = [run] if run else sorted(p.name for p in ws.dir("transcripts").iterdir() if p.is_dir())
    rows = [
        {
            "run_id": rid,
            "segment": r["segment"],
            "persona": r["persona"],
            "status": r.get("status"),
            "model": r.get("model"),
        }
        for rid in ids
        for r in transcripts.read_run(ws, rid)
    ]
    if as_json:
        return print_json(rows)
    for r in rows:
        console.print(
            f"{r['run_id']}  {r['segment']:<24} {r['persona']:<18} {r['status']:<15} {r['model']}",
            highlight=False,
            markup=False,
        )
    if not rows:
        console.print("no transcripts")


FORMATS = ("sft", "chat")
STATUSES = ("completed", "all")


@transcripts_app.command("export")
def export(
    fmt: str = typer.Option(
        "sft",
        "--format",
        help="sft: prompt/completion conversations; chat: each persona turn "
        "as messages with tool calls and tools (TRL's conversational format)",
    ),
    run: list[str] | None = typer.Option(None, "--run", help="only these runs (repeatable); default all"),
    persona: list[str] | None = typer.Option(None, "--persona", help="chat: only these personas (repeatable)"),
    step: list[str] | None = typer.Option(None, "--step", help="chat: only these steps (repeatable)"),
    status: str = typer.Option(
        "completed", "--status", help="chat: completed (runs that completed with every gate passed) or all"
    ),
    out: Path | None = typer.Option(None, "--out", "-o", help="JSONL file (default: stdout)"),
    prompt: str = typer.Option(
        "full",
        "--prompt",
        help="chat: full (the persona's brief and card tools, as the "
        "run had them) or compact (what a small model bound with --prompt compact reads)",
    ),
) -> None:
    """Turn the team's agent runs into training data (the self-training loop)."""
    if prompt not in ("full", "compact"):
        raise BadInput(f"--prompt: {prompt!r} is not one of full, compact")
    if fmt not in FORMATS:
        raise BadInput(f"--format: {fmt!r} is not supported ({', '.join(FORMATS)})")
    if status not in STATUSES:
        raise BadInput(f"--status: {status!r} is not one of {', '.join(STATUSES)}")
    if fmt == "sft":
        from trainteam.agents.replay import sft_examples

        examples = sft_examples(workspace(), list(run) if run else None)
    else:
        from trainteam.workflows.improve.self_improve import gather_rows

        rows = gather_rows(workspace(), list(run or []), list(persona or []), list(step or []), status, prompt)
        examples = [r.model_dump(mode="json") for r in rows]
    # keys as the rows hold them: a tool call's arguments are in its schema's order (chat_export.in_schema_order)
    lines = "".join(json.dumps(e) + "\n" for e in examples)
    if out is None:
        typer.echo(lines, nl=False)
    else:
        out.write_text(lines)
        console.print(f"{len(examples)} {fmt} rows → {out}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(transcripts_app, name="transcripts")
