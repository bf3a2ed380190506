"""`trainteam mcp [--http PORT]`: the team's tools over the Model Context Protocol (``trainteam.mcp_server``)."""

from __future__ import annotations

import typer

from trainteam.commands.common import STATE


def mcp_command(
    http: int | None = typer.Option(
        None,
        "--http",
        min=1,
        max=65535,
        metavar="PORT",
        help="serve streamable HTTP on 127.0.0.1:PORT (path /mcp) instead of stdio",
    ),
) -> None:
    """Serve the team's curation and training tools, runs, approvals and lineage over MCP (stdio, or --http PORT).

    Curation and training tools are plan-first (execute: true runs them); execute_workflow starts a run under the
    task's budget and approval rules. No tool decides an approval or raises a budget."""
    from trainteam.mcp_server.mcp_app import serve

    serve(STATE.workspace, http)


def register(app: typer.Typer) -> None:
    app.command("mcp")(mcp_command)
