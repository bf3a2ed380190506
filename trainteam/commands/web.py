"""`trainteam web [--port P] [--host H] [--new-token]`: the console for runs and approvals."""

from __future__ import annotations

import sys

import typer

from trainteam.commands.common import console, err_console, workspace
from trainteam.core.errors import BadInput

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def web(
    port: int = typer.Option(8765, "--port", "-p", min=0, max=65535, help="port to listen on (0: any free port)"),
    host: str = typer.Option("127.0.0.1", "--host", help="address to bind (default: this machine only)"),
    new_token: bool = typer.Option(
        False, "--new-token", help="print a new access token (replacing the old one) and exit; only its hash is stored"
    ),
) -> None:
    """Serve the web console (runs, live curves, approvals, lineage) until interrupted."""
    from trainteam.web.access import new_token as make_token
    from trainteam.web.access import stored_digest
    from trainteam.web.app import serve

    ws = workspace()
    if new_token:
        sys.stdout.write(make_token(ws.root) + "\n")
        return
    if stored_digest(ws.root) is None:
        raise BadInput("web: no access token yet; run `trainteam web --new-token` first and keep what it prints")
    if host not in LOOPBACK:
        err_console.print(
            f"warning: --host {host}: the console is reachable from other machines, over plain HTTP",
            highlight=False,
            markup=False,
        )
    try:
        serve(ws, host=host, port=port, announce=lambda line: console.print(line, highlight=False, markup=False))
    except KeyboardInterrupt:
        pass


def register(app: typer.Typer) -> None:
    app.command("web")(web)
