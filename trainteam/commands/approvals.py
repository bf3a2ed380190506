"""`trainteam approvals list|show|approve|reject` — the human channel of the approval queue."""

from __future__ import annotations

import typer

from trainteam.commands.common import console, print_json, read_stores, workspace
from trainteam.core.errors import BadInput
from trainteam.core.ids import check_run_id
from trainteam.workflows.engine.approval_ids import approval_public, resolve, short_id
from trainteam.workflows.engine.readonly import APPROVAL_STATUSES

approvals_app = typer.Typer(help="Gated actions waiting for a person.", no_args_is_help=True)


@approvals_app.command("list")
def list_(
    status: str = typer.Option("pending", help="pending | approved | rejected | expired | all"),
    run: str | None = typer.Option(None, "--run", help="only this run"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    if status != "all" and status not in APPROVAL_STATUSES:
        raise BadInput(f"--status: {status!r} is not one of {', '.join(APPROVAL_STATUSES)}, all")
    if run is not None:
        check_run_id(run, "--run")
    rows = read_stores()[1].list(None if status == "all" else status, run)
    if as_json:
        return print_json([approval_public(r) for r in rows])
    if not rows:
        console.print(f"no {'' if status == 'all' else status + ' '}approvals")
        return
    from rich.table import Table

    table = Table("id", "run", "step", "action", "status", "requested by", "created")
    for r in rows:
        table.add_row(
            short_id(r["id"]), r["run_id"], r["step"], r["action"], r["status"], r["requested_by"], r["created_at"][:19]
        )
    console.print(table)
    console.print("[dim]`trainteam approvals show ID` shows the evidence; ID is the short id or the full one[/dim]")


@approvals_app.command("show")
def show(approval_id: str, as_json: bool = typer.Option(False, "--json")) -> None:
    """An approval with the evidence a person decides on (``--json``: the stored row, for machines)."""
    row = resolve(read_stores()[1], approval_id)
    if as_json:
        return print_json(approval_public(row))
    from trainteam.commands.approval_text import render_approval
    from trainteam.workflows.report.evidence import approval_evidence_view

    render_approval(console, approval_evidence_view(row))


def _decide(approval_id: str, approve: bool, note: str | None, by: str | None, as_json: bool) -> None:
    from trainteam.workflows.engine.approvals import decide

    row = decide(workspace(), approval_id, approve=approve, by=by, note=note)
    if as_json:
        return print_json(row)
    console.print(f"approval {row['id']} [bold]{row['status']}[/bold] by {row['decided_by']}")


@approvals_app.command("approve")
def approve(
    approval_id: str,
    note: str | None = typer.Option(None, "--note", help="why"),
    by: str | None = typer.Option(None, "--by", help="who decides (default: your user name)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    _decide(approval_id, True, note, by, as_json)


@approvals_app.command("reject")
def reject(
    approval_id: str,
    note: str | None = typer.Option(None, "--note", help="why"),
    by: str | None = typer.Option(None, "--by", help="who decides (default: your user name)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    _decide(approval_id, False, note, by, as_json)


def register(app: typer.Typer) -> None:
    app.add_typer(approvals_app, name="approvals")
