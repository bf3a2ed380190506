"""`trainteam runs list|show|resume|cancel`."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from trainteam.commands.common import check_out_folder, console, print_json, read_stores, workspace
from trainteam.workflows.report.views import run_public, run_view, runs_view

runs_app = typer.Typer(help="Past and current runs.", no_args_is_help=True)


@runs_app.command("list")
def list_(
    limit: int = typer.Option(50, min=1, max=100_000, help="newest first, at most this many"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    rows = runs_view(read_stores()[0], limit)
    if as_json:
        return print_json(rows)
    if not rows:
        console.print("no runs")
        return
    from rich.table import Table

    table = Table("run", "workflow", "task", "status", "step", "created")
    for r in rows:
        table.add_row(r["run_id"], r["workflow"], r["task_name"], r["status"], r["current_step"] or "", r["created_at"])
    console.print(table)


@runs_app.command("show")
def show(run_id: str, as_json: bool = typer.Option(False, "--json")) -> None:
    view = run_view(*read_stores(), run_id)
    if as_json:
        return print_json(view)
    from rich.table import Table

    console.print(
        f"[bold]{view['run_id']}[/bold] {view['workflow']} / {view['task_name']}: "
        f"[bold]{view['status']}[/bold]" + (f" — {view['error']}" if view["error"] else ""),
        highlight=False,
    )
    table = Table("step", "visit", "persona", "status", "attempts", "seconds")
    for s in view["steps"]:
        table.add_row(
            s["name"],
            str(s["visit"]),
            s["persona"] or "",
            s["status"],
            str(s["attempts"]),
            f"{s['seconds']:.1f}" if s["seconds"] is not None else "",
        )
    console.print(table)
    for k, v in sorted(view["metrics"].items()):
        console.print(f"  {k} = {v:.4g}" if isinstance(v, float) else f"  {k} = {v}", highlight=False)
    for a in view["approvals"]:
        console.print(f"  approval {a['id']}: {a['status']}", highlight=False)
    for stage, found in view["search"].items():
        console.print(search_line(stage, found), highlight=False, markup=False)
    for entry in view["trained"]:
        console.print(trained_line(entry), highlight=False, markup=False)
    if view.get("sealed_test"):
        console.print(sealed_line(view["sealed_test"]), highlight=False, markup=False)


SEALED_SHOWN = ("rouge_l", "chrf", "form_rate", "exact_match", "heldout_loss")


def sealed_line(sealed: dict) -> str:
    """The figures to trust: the sealed test part, with the dev figures the gates read and the gap."""
    test, dev = sealed["test"], sealed["dev"]
    parts = [
        f"{k} {test[k]:.3g} (dev {dev[k]:.3g}, gap {test[k] - dev[k]:+.3g})" if k in dev else f"{k} {test[k]:.3g}"
        for k in SEALED_SHOWN
        if k in test
    ]
    line = f"sealed test ({sealed['rows']} rows, scored once; the figures to trust): {', '.join(parts)}"
    return line + (f"\n  {sealed['pairwise']}" if sealed.get("pairwise") else "")


# What a trained line shows of a resolved config (``runs show --json`` has all of it), in TRL's names
SHOWN = (
    "method",
    "learning_rate",
    "max_steps",
    "num_train_epochs",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "max_length",
    "warmup_steps",
    "warmup_ratio",
    "lr_scheduler_type",
    "weight_decay",
    "max_grad_norm",
    "precision",
    "seed",
    "threads",
)


def trained_line(entry: dict) -> str:
    """One line for what an attempt trained a stage with: the resolved config's main settings."""
    cfg = entry["config"]
    shown = [
        f"{k} {cfg[k]:g}" if isinstance(cfg[k], float) else f"{k} {cfg[k]}"
        for k in SHOWN
        if cfg.get(k) is not None and not (k == "max_steps" and cfg.get("num_train_epochs") is not None)
    ]
    if cfg.get("lora"):
        shown.append(f"lora r {cfg['lora'].get('r')}")
    shown += [f"trl.{k} {v}" for k, v in (cfg.get("trl") or {}).items()]
    return f"  trained {entry['step']}#{entry['visit']} {entry['stage']}: " + ", ".join(shown)


def search_line(stage: str, found: dict) -> str:
    """One line for a stage's recipe search: the rate chosen, among how many probes, and why."""
    chosen = found.get("chosen") or {}
    lr = chosen.get("learning_rate")
    head = f"  recipe search {stage}: " + (f"lr {lr:g}" if lr is not None else "no rate chosen")
    probes = found.get("probes") or []
    widened = f", {len(found['widened'])} beyond the prior's range" if found.get("widened") else ""
    return (
        head
        + f" among {len(probes)} probes{widened}"
        + (f": {found['choice_reason']}" if found.get("choice_reason") else "")
    )


@runs_app.command("resume")
def resume(
    run_id: str,
    force: bool = typer.Option(
        False, "--force", help="resume even if its process still holds its lease (a machine cut off from the database)"
    ),
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    yes: bool = typer.Option(False, "--yes", "-y", help="approve the run's gated actions up front, as you"),
) -> None:
    """Continue a run whose process died; finished steps are not run again."""
    import contextlib
    import getpass

    from trainteam.commands.execute import PreApprover
    from trainteam.workflows.runs.runner import resume_foreground

    ws = workspace()
    run_public(ws, run_id)  # a clear error for an unknown run, before starting the engine
    approver = PreApprover(ws, run_id, f"{getpass.getuser()} (--yes)") if yes else contextlib.nullcontext()
    try:
        with approver:
            result = resume_foreground(ws, run_id, force=force, progress=not quiet)
    except KeyboardInterrupt:
        sys.stderr.write(f"interrupted: continue with `trainteam runs resume {run_id}`\n")
        os._exit(130)
    console.print(
        f"run {run_id}: [bold]{result['status']}[/bold]" + (f" — {result['error']}" if result.get("error") else ""),
        highlight=False,
    )
    raise typer.Exit(0 if result["status"] == "completed" else 1)


@runs_app.command("cancel")
def cancel(run_id: str) -> None:
    """Stop a run at its next step boundary and mark it cancelled; its open approvals expire."""
    from trainteam.workflows.engine.approvals import cancel_run

    ws = workspace()
    view = run_public(ws, run_id)
    if view["status"] in ("completed", "failed", "cancelled"):
        console.print(f"run {run_id} is already {view['status']}")
        return
    expired = cancel_run(ws, run_id)
    console.print(f"run {run_id} cancelled" + (f"; {len(expired)} open approval(s) expired" if expired else ""))


@runs_app.command("report")
def report(
    run_id: str,
    out: Path = typer.Option(None, "--out", "-o", help="folder (default: workspace/reports/RUN)"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Write the run's report (markdown + loss, eval and time/cost plots) and print its path."""
    from trainteam.workflows.report.run_report import write_run_report

    if out is not None:
        check_out_folder(out, "--out")
    files = write_run_report(workspace(), run_id, out)
    if as_json:
        return print_json(files.model_dump(mode="json"))
    console.print(str(files.markdown))


def register(app: typer.Typer) -> None:
    app.add_typer(runs_app, name="runs")
