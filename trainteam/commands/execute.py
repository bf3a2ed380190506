"""`trainteam execute-workflow`, `worker` and `demo`: the commands that run work."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from trainteam.commands.common import console, err_console, print_json, workspace
from trainteam.core.errors import BadInput
from trainteam.workflows.report.views import run_public


def _exit_for(status: str) -> int:
    return 0 if status == "completed" else 1


class PreApprover:
    """``--yes``: the person running the command approves this run's gated actions up front.

    It is a human channel, like ``approvals approve``: each decision is recorded in the
    queue and the graph as made by that person (``<user> (--yes)``), one by one, as the
    run asks. Agents never reach it.
    """

    def __init__(self, ws, run_id: str, person: str):
        import threading

        self.ws, self.run_id, self.person = ws, run_id, person
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="pre-approver", daemon=True)

    def _loop(self) -> None:
        from trainteam.workflows.engine.approvals import decide
        from trainteam.workflows.engine.store import ApprovalStore

        store = ApprovalStore(self.ws.engine)
        while not self.stop.wait(0.05):
            for row in store.list("pending", self.run_id):
                decide(self.ws, row["id"], approve=True, by=self.person, note="approved up front with --yes")
                err_console.print(
                    f"[green]approved[/green] {row['action']} at {row['step']} (as {self.person}, --yes)",
                    highlight=False,
                )

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=5)


def execute(
    workflow: str,
    task,
    source: str,
    run_id: str | None,
    quiet: bool,
    as_json: bool,
    yes: bool = False,
    report: bool = False,
    detach: bool = False,
) -> int:
    """Run ``task`` (a TrainTask, or a task file path) to its end in this process, or with
    ``detach`` put it on the run queue for `trainteam worker` processes."""
    from trainteam.contract.train_task import load_task_file
    from trainteam.workflows.runs.runner import enqueue_run, prepare_run, run_foreground

    if isinstance(task, (str, Path)):
        task = load_task_file(Path(task))
    # the workspace is opened only after the task is known to be good: a bad file changes nothing
    new = prepare_run(workflow, task, source, run_id, "--run-id", workspace)
    ws, spec, task, run_id = new.ws, new.spec, new.task, new.run_id
    if detach:
        enqueue_run(new)
        if as_json:
            print_json(run_public(ws, run_id))
        else:
            console.print(
                f"run {run_id}: queued for `trainteam worker` (follow it with `trainteam runs show "
                f"{run_id}`; its output: {ws.dir('logs') / 'runs' / (run_id + '.log')})",
                highlight=False,
            )
        return 0
    if not quiet:
        err_console.print(
            f"run [bold]{run_id}[/bold]: workflow {spec.name}, task {task.name} (workspace {ws.root})", highlight=False
        )
    try:
        if yes:
            import getpass

            with PreApprover(ws, run_id, f"{getpass.getuser()} (--yes)"):
                result = run_foreground(ws, spec, task, run_id, progress=not quiet)
        else:
            result = run_foreground(ws, spec, task, run_id, progress=not quiet)
    except KeyboardInterrupt:
        err_console.print(f"interrupted: the run is kept; continue it with `trainteam runs resume {run_id}`")
        sys.stderr.flush()
        os._exit(130)  # DBOS threads parked in recv ignore SIGINT
    if as_json:
        print_json(run_public(ws, run_id))
    elif quiet and result["status"] != "completed":  # quiet hides progress, never why a run did not complete
        err_console.print(
            f"run {run_id}: {result['status']}"
            + (f" — {result['error']}" if result.get("error") else "")
            + f" (`trainteam runs show {run_id}`)",
            highlight=False,
        )
    elif not quiet:
        console.print(
            f"run {run_id}: [bold]{result['status']}[/bold]" + (f" — {result['error']}" if result.get("error") else ""),
            highlight=False,
        )
        if report:
            from trainteam.workflows.report.run_report import write_run_report

            console.print(f"report: {write_run_report(ws, run_id).markdown}", highlight=False)
        else:
            console.print(f"report: `trainteam runs report {run_id}`", highlight=False)
    return _exit_for(result["status"])


def register(app: typer.Typer) -> None:
    @app.command("execute-workflow")
    def execute_workflow(
        workflow: str = typer.Argument(..., help="bundled workflow name (train_model) or a spec YAML path"),
        task: Path = typer.Option(..., "--task", "-t", help="task YAML file"),
        run_id: str | None = typer.Option(None, "--run-id", help="choose the run id (default: generated)"),
        quiet: bool = typer.Option(False, "--quiet", "-q", help="no progress output"),
        as_json: bool = typer.Option(False, "--json", help="print the finished run as JSON"),
        yes: bool = typer.Option(False, "--yes", "-y", help="approve this run's gated actions up front, as you"),
        detach: bool = typer.Option(
            False, "--detach", "-d", help="put the run on the queue for `trainteam worker` processes and return at once"
        ),
    ) -> None:
        """Run a workflow on a task in this process, durably: if the process dies,
        `trainteam runs resume RUN` continues where it stopped.

        With --detach the run goes on the queue and a `trainteam worker` runs it."""
        if detach and yes:
            raise BadInput("--yes: not with --detach (a queued run's approvals are decided with `trainteam approvals`)")
        raise typer.Exit(execute(workflow, task, str(task), run_id, quiet, as_json, yes, detach=detach))

    @app.command("worker")
    def worker(
        once: bool = typer.Option(False, "--once", help="exit when the queue is empty and this worker's runs ended"),
        concurrency: int = typer.Option(
            1, "--concurrency", min=1, help="runs this worker takes at once (the queue's limit per worker)"
        ),
        global_concurrency: int | None = typer.Option(
            None, "--global-concurrency", min=1, help="runs all workers take at once (default: no limit)"
        ),
        poll: float = typer.Option(
            1.0, min=0.05, help="seconds between looks at the queue and for runs of dead processes"
        ),
    ) -> None:
        """Serve runs: takes queued runs and resumes runs whose process died, on any host.

        Queued runs come from `execute-workflow --detach`; a dead process is told by its lease on the
        workspace database. Each run's output goes to logs/runs/RUN.log."""
        from trainteam.workflows.runs.runner import WorkerLimits, serve

        if global_concurrency is not None and global_concurrency < concurrency:
            raise BadInput(f"--global-concurrency: {global_concurrency} is less than --concurrency {concurrency}")
        try:
            serve(workspace(), once=once, limits=WorkerLimits(concurrency, global_concurrency, poll))
        except KeyboardInterrupt:
            os._exit(130)

    @app.command("demo")
    def demo(
        yes: bool = typer.Option(
            False,
            "--yes",
            "-y",
            help="approve the demo's gated actions (registering the "
            "model) up front, as you; without it the run waits for `trainteam approvals`",
        ),
        quiet: bool = typer.Option(False, "--quiet", "-q"),
    ) -> None:
        """The team at work on the bundled demo request, submitted in natural language."""
        from trainteam.workflows.requests.submission import DEMO_REQUEST, parse_request, plan_request

        err_console.print(f"[bold]request:[/bold] {DEMO_REQUEST}\n", highlight=False)
        task = parse_request(DEMO_REQUEST)
        if not quiet:
            from trainteam.workflows.engine.spec import load_builtin

            steps = load_builtin(task.workflow).describe_steps(task.stages)
            err_console.print(plan_request(task, steps=steps).text(), highlight=False, markup=False)
        raise typer.Exit(execute("train_model", task, "demo request", None, quiet, False, yes, report=True))
