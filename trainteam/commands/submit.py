"""`trainteam submit "..."`: a request in plain words → a validated task, its plan, and (once confirmed) the run.

The plan shown first quotes the words each model, data and stage choice came from ("  understood:
..." lines), lists the model names it does not use ("  ignored: ..."), and states every default the
task fills in that the request leaves out ("  default: ..." lines: a tiny llama for the bundled demo,
the recipe search for missing hyper-parameters, where held-out rows come from). A model the request
names is a folder, a model registered in the workspace, or one in the local Hugging Face cache (read
offline, never downloaded); one it cannot find, a closed model, two models, no budget, a task the
planner cannot run, a request over 4,000 characters or with control characters: one line and exit
2. Nothing is written to the workspace before the person confirms.
"""

from __future__ import annotations

import os
import sys

import typer

from trainteam.commands.common import STATE, console, err_console, print_json, workspace
from trainteam.core.errors import BadInput


def submit_command(
    request: str = typer.Argument(
        ...,
        help='what to train, on what data, within what budget, e.g. "pretrain a tiny '
        'llama on the addition demo, budget 20 minutes"',
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="start without asking for confirmation"),
    plan_only: bool = typer.Option(False, "--plan-only", help="print the validated task and plan, then exit"),
    as_json: bool = typer.Option(False, "--json", help="with --plan-only: the task and plan as JSON"),
    run_id: str | None = typer.Option(None, "--run-id", help="choose the run id (default: generated)"),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress output while it runs"),
) -> None:
    """Submit a training request in natural language; the ml_orchestrator turns it into a task."""
    from trainteam.workflows.requests.request_rules import request_refusal

    refusal = request_refusal(request)  # refused at once: before pydantic-ai is imported or any model sees it
    if refusal:
        raise BadInput(refusal)
    from trainteam.workflows.engine.spec import load_builtin
    from trainteam.workflows.requests.model_sources import ModelSources
    from trainteam.workflows.requests.submission import parse_request, plan_request

    sources = ModelSources.find(workspace=STATE.workspace)  # the workspace's registered models, read only
    task = parse_request(request, sources=sources)
    plan = plan_request(
        task, steps=load_builtin(task.workflow).describe_steps(task.stages), request=request, sources=sources
    )
    if as_json and plan_only:
        print_json({"task": task.model_dump(mode="json"), "plan": plan.model_dump(mode="json")})
        return
    out = console if plan_only else err_console
    out.print(plan.text(), highlight=False, markup=False)
    if plan_only:
        import yaml

        console.print(
            "\n# task\n" + yaml.safe_dump(task.model_dump(mode="json", exclude_unset=True), sort_keys=False),
            highlight=False,
            markup=False,
        )
        return
    if not yes and not typer.confirm("Start this run?", default=False, err=True):
        err_console.print("not started")
        raise typer.Exit(1)
    from trainteam.api import execute_workflow

    ws = workspace()
    try:
        view = execute_workflow(task.workflow, task, workspace=ws, run_id=run_id, progress=not quiet)
    except KeyboardInterrupt:
        err_console.print(
            "interrupted: the run is kept; `trainteam runs list` shows it, `runs resume RUN` continues it"
        )
        sys.stderr.flush()
        os._exit(130)  # DBOS threads parked in recv ignore SIGINT
    if as_json:
        print_json(view)
    else:
        console.print(
            f"run {view.get('run_id')}: [bold]{view.get('status')}[/bold]"
            + (f" — {view['error']}" if view.get("error") else ""),
            highlight=False,
        )
    raise typer.Exit(0 if view.get("status") == "completed" else 1)


def register(app: typer.Typer) -> None:
    app.command("submit")(submit_command)
