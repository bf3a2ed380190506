"""`trainteam graph lineage|export|nodes`."""

from __future__ import annotations

from pathlib import Path

import typer

from trainteam.commands.common import check_out_file, console, print_json, workspace
from trainteam.core.errors import BadInput, NotFound

graph_app = typer.Typer(help="The knowledge graph of runs, data and models.", no_args_is_help=True)


@graph_app.command("lineage")
def lineage(
    node: str = typer.Argument(..., help="node id (Model:abc) or its unique key"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Every ancestor of a node: what it was derived from, trained on, produced by."""
    from trainteam.graph.knowledge import UnknownNode

    try:
        sub = workspace().graph.lineage(node)
    except UnknownNode as exc:
        raise NotFound(str(exc.args[0])) from None
    nodes = sorted(sub.nodes(data=True), key=lambda x: (x[1]["kind"], x[0]))
    edges = [{"src": u, "dst": v, "kind": k} for u, v, k in sub.edges(keys=True)]
    if as_json:
        return print_json({"nodes": [{"id": n, **d} for n, d in nodes], "edges": edges})
    for n, d in nodes:
        console.print(f"[bold]{d['kind']}[/bold] {n}", highlight=False)
    for e in edges:
        console.print(f"  {e['src']} --{e['kind']}--> {e['dst']}", highlight=False)


@graph_app.command("export")
def export(
    fmt: str = typer.Option("json", "--format", help="graphml | json"),
    out: Path | None = typer.Option(None, "--out", "-o", help="file (default: workspace/reports/graph.FMT)"),
) -> None:
    if fmt not in ("graphml", "json"):
        raise BadInput(f"--format: unknown format {fmt!r} (graphml, json)")
    if out is not None:
        check_out_file(out, "--out")
    ws = workspace()
    path = out or ws.dir("reports") / f"graph.{fmt}"
    ws.graph.export(path, fmt)
    console.print(str(path))


@graph_app.command("nodes")
def nodes(
    kind: str | None = typer.Option(None, help="only this kind (Model, Run, ...)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    from trainteam.graph import NodeKind

    if kind is not None and kind not in {k.value for k in NodeKind}:
        raise BadInput(f"--kind: unknown node kind {kind!r} ({', '.join(k.value for k in NodeKind)})")
    rows = workspace().graph.nodes(kind)
    if as_json:
        return print_json(rows)
    for r in rows:
        console.print(f"[bold]{r['kind']}[/bold] {r['id']}", highlight=False)


def register(app: typer.Typer) -> None:
    app.add_typer(graph_app, name="graph")
