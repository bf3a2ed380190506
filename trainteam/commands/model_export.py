"""`trainteam models export MODEL --format gguf|hf|ollama --out DIR`: a registered model leaves, checked.

Imports only typer and the standard library at its top (``trainteam models --help`` loads it); the work is in
``workflows/report/model_export.py`` and ``trainers/export/``.
"""

from __future__ import annotations

from pathlib import Path

import typer

from trainteam.commands.common import console, err_console, print_json, workspace
from trainteam.core.errors import BadInput, format_validation_error


def export(
    model: str = typer.Argument(..., help="model id, unique id prefix or name (`trainteam models list`)"),
    fmt: str = typer.Option(..., "--format", help="gguf (llama.cpp), ollama (a GGUF and its Modelfile) or hf"),
    out: Path = typer.Option(..., "--out", help="the folder to create (it must not exist)"),
    quant: str = typer.Option("f16", "--quant", help="gguf, ollama: f16 or q8_0"),
    rows: Path | None = typer.Option(
        None, "--rows", help="answered rows to check the export on (default: the held-out rows of the model's run)"
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Write a registered model as GGUF, an Ollama folder or a Hugging Face folder, and read it back.

    The export is loaded again (a GGUF by transformers' GGUF reader) and answers the held-out rows of the run that
    made the model: its score must be within 0.02 of the registered model's, its tokenizer identical, its answers
    stopping at end-of-turn; the Ollama template must render as the chat template does. Written into a temporary
    folder and renamed at the end: a failure leaves nothing. Progress goes to stderr.
    """
    from pydantic import ValidationError

    from trainteam.trainers.export.exporter import ExportRequest
    from trainteam.workflows.report.model_export import plan_export, run_export

    try:
        request = ExportRequest.model_validate({"format": fmt, "quant": quant, "out": out})
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, "models export")) from None
    ws = workspace()
    planned = plan_export(ws, model, request, rows)
    say = lambda line: err_console.print(line, highlight=False, markup=False)  # noqa: E731
    p = planned.plan
    say(f"exporting {p.model_id} ({p.name}) as {p.format}{f' {p.quant}' if p.quant else ''} -> {p.out}")
    say(f"  checked on {p.rows_source}")
    result = run_export(ws, planned, say)
    if as_json:
        return print_json(result.model_dump(mode="json"))
    console.print(f"exported {result.model_id} -> {result.out}", highlight=False)
    for name, size in result.files.items():
        console.print(f"  {name}  {size / 1e6:.1f} MB", highlight=False)
    console.print(f"  sha256 {result.sha256[:16]}  written in {result.write_seconds:.1f} s", highlight=False)
    console.print(f"  read back: {result.check.line()}", highlight=False)
    console.print(f"  {result.seconds:.0f} s in all", highlight=False)
