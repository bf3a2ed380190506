"""`trainteam workflows list|show|validate`."""

from __future__ import annotations

from pathlib import Path

import typer

from trainteam.commands.common import console, print_json

workflows_app = typer.Typer(help="Workflow specs.", no_args_is_help=True)


@workflows_app.command("list")
def list_(as_json: bool = typer.Option(False, "--json")) -> None:
    from trainteam.workflows.engine.spec import builtin_names, load_builtin

    specs = [load_builtin(n) for n in builtin_names()]
    if as_json:
        return print_json([{"name": s.name, "version": s.version, "steps": [x.name for x in s.steps]} for s in specs])
    for s in specs:
        console.print(f"[bold]{s.name}[/bold] v{s.version}: {' → '.join(x.name for x in s.steps)}", highlight=False)


@workflows_app.command("show")
def show(
    name: str,
    mermaid: bool = typer.Option(False, "--mermaid", help="print a Mermaid flowchart"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    from trainteam.workflows.engine.spec import load_builtin

    spec = load_builtin(name)
    if mermaid:
        print(spec.mermaid())
    elif as_json:
        print_json(spec.model_dump(mode="json", by_alias=True))
    else:
        for s in spec.steps:
            console.print(
                f"[bold]{s.name}[/bold] ({s.persona}, tool {s.tool})"
                + (" [gate]" if s.gate else "")
                + (f" stage={'|'.join(s.stage)}" if s.stage else ""),
                highlight=False,
            )
        for e in spec.edges:
            console.print(
                f"  {e.source} -> {e.target} when {e.when}" + (f" max {e.max_loops}x" if e.max_loops else ""),
                highlight=False,
            )


@workflows_app.command("validate")
def validate(path: Path) -> None:
    """Check a workflow spec file as a run would: a bounded, UTF-8, regular file; YAML within the
    depth/alias/size limits; fields and graph; each step's tool known and on its persona's card.
    Errors are one line naming the field (steps.NAME.tool), exit 2."""
    from trainteam.workflows.engine.spec import load_spec_file

    spec = load_spec_file(path)
    console.print(f"{path}: ok ({spec.name}, {len(spec.steps)} steps)")


def register(app: typer.Typer) -> None:
    app.add_typer(workflows_app, name="workflows")
