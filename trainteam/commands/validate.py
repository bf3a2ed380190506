"""`trainteam validate TASK`: check a task completely before any run exists, writing nothing.

One line per check (``trainteam.workflows.task.task_check``): the task parses, the model folder
loads, the preflight a run passes (data rows and columns, trackers, ``trl:`` blocks, the
planner's refusals), each stage's tokens with the task's tokenizer, its ``trl:`` fields and
its plan against the budget. The first failing check is one line naming the field, exit 2.
"""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

import typer

from trainteam.commands.common import console, print_json


def validate_command(
    task: Path = typer.Argument(..., help="the task file (YAML)"),
    measure: bool = typer.Option(
        True,
        "--measure/--no-measure",
        help="time a few training steps of the model on "
        "this machine for the plan (cached per model and machine outside the workspace, "
        "with the load it was taken under; taken again when the load differs)",
    ),
    remeasure: bool = typer.Option(
        False, "--remeasure", help="measure the throughput again even where a measurement stored for this load exists"
    ),
    as_json: bool = typer.Option(False, "--json", help="print the checks as JSON"),
) -> None:
    """Check a task completely (task, model, data, tokens, trl, plan) without starting a run; writes nothing."""
    from trainteam.trainers.planning.calibrate import remeasuring
    from trainteam.workflows.task.task_check import check_task

    found: list = []
    with remeasuring() if remeasure else nullcontext():
        _print_checks(check_task(task, measure=measure or remeasure), found, as_json)
    if as_json:
        print_json([{"check": c.name, "status": c.status, "found": c.found} for c in found])


def _print_checks(checks, found: list, as_json: bool) -> None:
    from trainteam.workflows.task.task_check import CheckFailed

    try:
        for check in checks:
            found.append(check)
            if not as_json:
                console.print(check.line(), highlight=False, markup=False)
    except CheckFailed as failed:
        if not as_json:
            console.print(f"✗ {failed.check}", highlight=False, markup=False)
        raise


def register(app: typer.Typer) -> None:
    app.command("validate")(validate_command)
