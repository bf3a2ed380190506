"""`trainteam models list|show|bind|unbind|import`: the model registry, role binding, and GGUF import.

Registering happens in the workflow's gated ``register_model`` step (a person approves
it); these commands read the registry and move role tags. No torch is imported, except by
``import``, which converts a local GGUF file into a safetensors folder a task can name.
"""

from __future__ import annotations

from pathlib import Path

import typer

from trainteam.commands.common import console, err_console, print_json, workspace
from trainteam.core.errors import BadInput
from trainteam.trainers.serving.gguf_import import LOGITS_TOLERANCE, import_gguf

models_app = typer.Typer(help="Registered models and the roles they serve.", no_args_is_help=True)


def _registry():
    from trainteam.trainers.serving.registry import ModelRegistry

    return ModelRegistry.of(workspace())


@models_app.command("list")
def list_models(as_json: bool = typer.Option(False, "--json")) -> None:
    """Every registered model, oldest first, with its stage, key metrics and roles."""
    rows = _registry().list()
    if as_json:
        return print_json([m.model_dump() for m in rows])
    if not rows:
        console.print("no models registered")
        return
    from rich.table import Table

    table = Table("id", "name", "stage", "metrics", "roles", "registered")
    for m in rows:
        metrics = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(m.metrics.items())[:4]
        )
        table.add_row(m.id, m.name, m.stage, metrics, ", ".join(m.roles), m.created_at[:19])
    console.print(table)


@models_app.command("show")
def show(
    model: str = typer.Argument(..., help="model id, unique id prefix or name"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """One model: path, base, stage, metrics, lineage, roles."""
    rec = _registry().get(model)
    if as_json:
        return print_json(rec.model_dump())
    for key, value in rec.model_dump().items():
        console.print(f"[bold]{key}[/bold]: {value}", highlight=False)


@models_app.command("bind")
def bind(
    refs: list[str] = typer.Argument(..., help="MODEL with --role ROLE (or the older ROLE MODEL)"),
    role: str = typer.Option(None, "--role", help="eval_judge, chat, ... or persona:NAME (the persona runs on it)"),
    prompt: str = typer.Option(
        "full",
        "--prompt",
        help="persona roles: full (the persona's brief and every "
        "card tool) or compact (a small model trained on `transcripts export --prompt "
        "compact` rows: a short brief, the step's tool only)",
    ),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Point a role at a model (moves the role if another model had it).

    ``--role persona:training_engineer`` makes that persona run on the model, served on 127.0.0.1 by
    the process that runs it, unless TRAINTEAM_MODEL_TRAINING_ENGINEER says otherwise.
    """
    import getpass

    from trainteam.agents.bound_models import bind_role

    if prompt not in ("full", "compact"):
        raise BadInput(f"--prompt: {prompt!r} is not one of full, compact")
    if role is None and len(refs) == 2:
        role, model = refs
    elif role is not None and len(refs) == 1:
        model = refs[0]
    else:
        raise BadInput("models bind: give MODEL --role ROLE (or ROLE MODEL)")
    rec = bind_role(workspace(), role, model, by=getpass.getuser(), prompt=prompt)
    if as_json:
        return print_json({"role": role, "model": rec.id, **({"prompt": prompt} if prompt != "full" else {})})
    console.print(
        f"{role} -> {rec.id} ({rec.name})" + (f", prompt {prompt}" if prompt != "full" else ""), highlight=False
    )


@models_app.command("unbind")
def unbind(
    role: str = typer.Argument(..., help="the role to free, e.g. persona:training_engineer"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Free a role (the model stays registered); a persona's role freed runs the offline policy again."""
    import getpass

    from trainteam.agents.bound_models import unbind_role

    was = unbind_role(workspace(), role, by=getpass.getuser())
    if as_json:
        return print_json({"role": role, "was": was})
    console.print(f"{role} unbound (was {was})" if was else f"{role} was not bound", highlight=False)


@models_app.command("import")
def import_model(
    source: Path = typer.Argument(..., help="a local .gguf file"),
    out: Path = typer.Option(..., "--out", help="the folder to create (absent or empty)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Convert a GGUF checkpoint into a safetensors Hugging Face folder with its tokenizer and chat template.

    The saved folder is reloaded and its logits compared with the loaded model's; on a mismatch nothing is kept.
    Progress goes to stderr.
    """
    result = import_gguf(source, out, progress=lambda line: err_console.print(line, highlight=False, markup=False))
    if as_json:
        return print_json({**result.__dict__, "folder": str(result.folder)})
    console.print(f"imported {source.name} -> {result.folder}", highlight=False)
    console.print(
        f"  {result.architecture}, {result.parameters:,} parameters ({result.parameters / 1e6:.1f}M), "
        f"{result.dtype}, {result.seconds:.0f} s",
        highlight=False,
    )
    console.print(
        f"  logits check: max abs diff {result.max_abs_logit_diff:.3g} (limit {LOGITS_TOLERANCE:g}) ok", highlight=False
    )
    console.print(
        f"  chat template: {'found' if result.chat_template else 'none (the plain prompt format applies)'}",
        highlight=False,
    )


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
