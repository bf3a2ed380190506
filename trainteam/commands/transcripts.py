"""`trainteam transcripts list|export`: the team's recorded agent runs, and SFT data made from them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from trainteam.commands.common import console, print_json, workspace
from trainteam.core.errors import BadInput

transcripts_app = typer.Typer(help="Recorded agent runs (redacted pydantic-ai messages).", no_args_is_help=True)


@transcripts_app.command("list")
def list_(run: Optional[str] = typer.Option(None, "--run", help="only this run"),
          as_json: bool = typer.Option(False, "--json")) -> None:
    from trainteam.agents import transcripts

    ws = workspace()
    ids = [run] if run else sorted(p.name for p in ws.dir("transcripts").iterdir() if p.is_dir())
    rows = [{"run_id": rid, "segment": r["segment"], "persona": r["persona"], "status": r.get("status"),
             "model": r.get("model")} for rid in ids for r in transcripts.read_run(ws, rid)]
    if as_json:
        return print_json(rows)
    for r in rows:
        console.print(f"{r['run_id']}  {r['segment']:<24} {r['persona']:<18} {r['status']:<15} {r['model']}",
                      highlight=False, markup=False)
    if not rows:
        console.print("no transcripts")


@transcripts_app.command("export")
def export(
    fmt: str = typer.Option("sft", "--format", help="sft: prompt/completion conversations for SFTTrainer"),
    run: Optional[List[str]] = typer.Option(None, "--run", help="only these runs (repeatable); default all"),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="JSONL file (default: stdout)"),
) -> None:
    """Turn successful agent runs into SFT data (the self-training loop), via the curation builders."""
    from trainteam.agents.replay import sft_examples

    if fmt != "sft":
        raise BadInput(f"--format: {fmt!r} is not supported (sft)")
    examples = sft_examples(workspace(), list(run) if run else None)
    lines = "".join(json.dumps(e, sort_keys=True) + "\n" for e in examples)
    if out is None:
        typer.echo(lines, nl=False)
    else:
        out.write_text(lines)
        console.print(f"{len(examples)} SFT examples → {out}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(transcripts_app, name="transcripts")
