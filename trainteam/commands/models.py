"""`trainteam models list|show|bind|unbind|import`: the model registry, role binding, and GGUF import.

A trained model is registered in the workflow's gated ``register_model`` step (a person approves
it); these commands read the registry and move role tags. No torch is imported, except by
``import``, which converts a local GGUF file into a safetensors folder a task can name, and with
``--register`` records it (or a Hugging Face model folder, as it is) as an imported base model.
"""

from __future__ import annotations

from pathlib import Path

import typer

from trainteam.commands.common import console, err_console, print_json, workspace
from trainteam.commands.model_export import export
from trainteam.core.errors import BadInput
from trainteam.core.hashing import sha256_file
from trainteam.core.ids import check_run_id
from trainteam.trainers.serving.gguf_import import (
    LOGITS_TOLERANCE,
    ImportResult,
    ModelFacts,
    check_destination,
    check_model_folder,
    check_source,
    folder_facts,
    import_gguf,
)

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
    """One model: path, base, stage, metrics, lineage, roles, and its exports (``models export``)."""
    from trainteam.trainers.serving.registry import ModelRegistry
    from trainteam.workflows.report.model_export import exports_of

    ws = workspace()
    rec = ModelRegistry.of(ws).get(model)
    exports = exports_of(ws, rec.id)
    if as_json:
        return print_json({**rec.model_dump(), "exports": exports})
    for key, value in rec.model_dump().items():
        console.print(f"[bold]{key}[/bold]: {value}", highlight=False)
    console.print(f"[bold]exports[/bold]: {len(exports) or 'none'}", highlight=False)
    for e in exports:
        kind = f"{e['format']} {e['quant']}" if e.get("quant") else e["format"]
        console.print(f"  {e['at'][:19]}  {kind}  {e['path']}  sha256 {str(e['sha256'])[:16]}", highlight=False)
        console.print(f"    read back: {e['check']}", highlight=False)


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


def _converted(source: Path, out: Path, as_json: bool) -> ImportResult:
    """The GGUF file converted into ``out``: progress to stderr, the evidence to stdout (not with --json)."""
    result = import_gguf(source, out, progress=lambda line: err_console.print(line, highlight=False, markup=False))
    if as_json:
        return result
    console.print(f"imported {source.name} -> {result.folder}", highlight=False)
    console.print(
        f"  {result.architecture}, {result.parameters:,} parameters ({result.parameters / 1e6:.1f}M), "
        f"{result.dtype}, {result.seconds:.0f} s",
        highlight=False,
    )
    console.print(
        f"  logits check: max abs diff {result.max_abs_logit_diff:.3g} (limit {LOGITS_TOLERANCE:g}) ok", highlight=False
    )
    console.print(f"  prompts: {_template_line(result)}", highlight=False)
    return result


def _template_line(result: ImportResult) -> str:
    """What a run will prompt the imported model with: its own template, a family's turn format its vocabulary
    holds (a base model, ``load_tokenizer``'s choice), or plain prompts; said as ``validate`` says it."""
    from trainteam.trainers.training.chat_templates import template_choice
    from trainteam.trainers.training.tokenizer import load_tokenizer

    return template_choice(result.folder, load_tokenizer(result.folder))


def _imported_name(name: str | None, default: str) -> str:
    """``--name``, else the folder's name; either must be a valid name."""
    if name is not None:
        return check_run_id(name, "--name")
    try:
        return check_run_id(default, "name")
    except BadInput as exc:
        raise BadInput(f"{exc}; it is the folder's name: give --name NAME") from None


def _check_name_free(registry, name: str, content_hash: str | None, given: bool) -> None:
    """BadInput when ``name`` (case aside) names a registered model whose content is not ``content_hash``."""
    for m in registry.list():
        if m.name.lower() == name.lower() and m.content_hash != content_hash:
            what = f"--name {name}" if given else f"name {name} (the folder's name)"
            raise BadInput(f"{what}: already names registered model {m.id} ({m.path}); give another --name")


def _lineage(source: Path, kind: str, source_hash: str, facts: ModelFacts) -> dict:
    """Where an imported base came from; ``source_hash``: a GGUF file's sha256, a folder's registry content hash."""
    return {
        "source": str(source),
        "source_kind": kind,
        "source_hash": source_hash,
        "architecture": facts.architecture,
        "model_type": facts.model_type,
        "parameters": facts.parameters,
    }


def _register_imported(ws, folder: Path, name: str, lineage: dict):
    """The folder registered as an imported base, its Model node recorded as the workflow's register step records
    one: ``(record, already)``, ``already`` when the same content was registered before (that record comes back)."""
    from trainteam.trainers.serving.registry import ModelRegistry
    from trainteam.workflows.steps.register import register_and_record

    before = {m.id for m in ModelRegistry.of(ws).list()}
    rec, _node = register_and_record(ws, folder, stage="imported", base=lineage["source"], name=name, lineage=lineage)
    return rec, rec.id in before


def _say_registered(rec, already: str | None, report: dict, as_json: bool) -> None:
    """``already``: why nothing new was registered (the same content, the same GGUF file), or None."""
    if as_json:
        return print_json({**report, "model": rec.model_dump(), "already_registered": already is not None})
    if already is not None:
        console.print(
            f"already registered: {rec.id} '{rec.name}' ({rec.stage}, {rec.path}) {already}; nothing new registered",
            highlight=False,
        )
        return
    lin, say = rec.lineage, lambda line: console.print(line, highlight=False)
    count = lin.get("parameters")
    params = f", {count:,} parameters ({count / 1e6:.1f}M)" if count else ", parameter count unknown"
    say(f"registered {rec.id} '{rec.name}' (stage {rec.stage}) -> {rec.path}")
    say(f"  {lin['architecture']}{params}, prompt format {rec.prompt_format}")
    say(f"  from {lin['source']} ({lin['source_kind']}, content hash {lin['source_hash'][:12]})")
    say(f"  a request names it: 'fine-tune registered model {rec.name} on DATA ...'")


def _same_content(rec, name: str) -> str:
    return "holds the same content" + (f" (it keeps its name, not '{name}')" if rec.name != name else "")


def _import_folder(source: Path, name: str | None, as_json: bool) -> None:
    """A Hugging Face model folder registered where it is (nothing converted or copied)."""
    from trainteam.trainers.serving.registry import ModelRegistry, checkpoint_hash

    folder = check_model_folder(source)
    facts, model_name = folder_facts(folder), _imported_name(name, folder.name)
    ws = workspace()
    digest = checkpoint_hash(folder)
    _check_name_free(ModelRegistry.of(ws), model_name, digest, given=name is not None)
    rec, already = _register_imported(ws, folder, model_name, _lineage(folder, "folder", digest, facts))
    _say_registered(rec, _same_content(rec, model_name) if already else None, {"folder": str(folder)}, as_json)


def _default_folder(ws, name: str) -> Path:
    folder = ws.dir("models") / name
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise BadInput(f"{folder}: already exists (the folder --register picks for '{name}'); give --name or --out DIR")
    return folder


def _import_gguf_registered(source: Path, out: Path | None, name: str | None, as_json: bool) -> None:
    """A GGUF file converted (into --out, else the workspace's models/NAME) and registered."""
    from trainteam.trainers.serving.registry import ModelRegistry

    gguf = check_source(source)
    if out is not None:
        check_destination(out)
    model_name = _imported_name(name, out.name if out is not None else gguf.stem)
    ws = workspace()
    registry, source_hash = ModelRegistry.of(ws), sha256_file(gguf)
    for m in registry.list():
        if m.lineage.get("source_kind") == "gguf" and m.lineage.get("source_hash") == source_hash:
            return _say_registered(m, "was imported from the same GGUF file", {"folder": m.path}, as_json)
    _check_name_free(registry, model_name, None, given=name is not None)
    result = _converted(gguf, out if out is not None else _default_folder(ws, model_name), as_json)
    lineage = _lineage(gguf, "gguf", source_hash, folder_facts(result.folder))
    rec, already = _register_imported(ws, result.folder, model_name, lineage)
    report = {**result.__dict__, "folder": str(result.folder)}
    _say_registered(rec, _same_content(rec, model_name) if already else None, report, as_json)


@models_app.command("import")
def import_model(
    source: Path = typer.Argument(..., help="a local .gguf file, or a Hugging Face model folder (with --register)"),
    out: Path | None = typer.Option(
        None, "--out", help="the folder to convert a GGUF into (absent or empty); with --register, default models/NAME"
    ),
    register_it: bool = typer.Option(
        False, "--register", help="register the model in the workspace as an imported base (stage imported)"
    ),
    name: str | None = typer.Option(None, "--name", help="the registered name (default: the folder's name)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Convert a GGUF checkpoint into a safetensors Hugging Face folder with its tokenizer and chat template,
    and with --register put it (or a Hugging Face model folder, registered where it is) in the model registry.

    The saved folder is reloaded and its logits compared with the loaded model's; on a mismatch nothing is kept.
    Progress goes to stderr. A request then names the model: "fine-tune registered model NAME on ...".
    """
    if Path(source).expanduser().is_dir():
        if out is not None:
            raise BadInput(f"--out: {source} is a model folder, registered where it is (not copied); drop --out")
        if not register_it:
            raise BadInput(f"{source}: a model folder needs no conversion; add --register to register it where it is")
        return _import_folder(source, name, as_json)
    if register_it:
        return _import_gguf_registered(source, out, name, as_json)
    if name is not None:
        raise BadInput("--name: only a registered model has a name; add --register")
    if out is None:
        raise BadInput("--out DIR is missing: the folder to convert the GGUF file into (or add --register)")
    result = _converted(source, out, as_json)
    if as_json:
        print_json({**result.__dict__, "folder": str(result.folder)})


models_app.command("export")(export)


def register(app: typer.Typer) -> None:
    app.add_typer(models_app, name="models")
