"""Check, start, resume and serve runs in this process (the long-running side).

``prepare_run`` is the one way a new run is checked before anything is written (the CLI's
``execute-workflow`` and the Python ``execute_workflow`` both call it); ``run_foreground``
then runs it here. The engine (``workflows/engine.py``, which imports DBOS, ~1 s) is
imported only when a run starts: short commands that only check stay fast.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from trainteam.agents.redact import redact_text
from trainteam.core.errors import BadInput, RunStopped
from trainteam.core.ids import check_run_id
from trainteam.workflows.preflight import preflight
from trainteam.workflows.spec import WorkflowSpec, load_builtin
from trainteam.workflows.store import RunStore
from trainteam.workflows.task import TrainTask


def new_run_id(task_name: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{task_name[:24]}-{stamp}-{secrets.token_hex(2)}"


def check_runnable(spec: WorkflowSpec, task: TrainTask, source: str) -> None:
    """Everything that can be known before a run starts is checked here, so a bad task
    file fails with one line and leaves the workspace untouched."""
    names = {s.name for s in spec.steps}
    for i, step in enumerate(task.require_approval):
        if step not in names:
            raise BadInput(f"{source}: require_approval[{i}]: unknown step {step!r} (steps: {', '.join(sorted(names))})")
    if task.workflow != spec.name:
        raise BadInput(f"{source}: workflow: task is for {task.workflow!r}, not {spec.name!r}")
    preflight(task, source)


def check_chosen_run_id(run_id: str, option: str = "--run-id") -> str:
    """The id grammar, and not secret-shaped (it would be masked in every record and path)."""
    check_run_id(run_id, option)
    if redact_text(run_id) != run_id:
        raise BadInput(f"{option}: {run_id[:8]}… looks like a secret key; it would be masked in every record")
    return run_id


def check_new_run_id(ws, run_id: str, option: str = "--run-id") -> str:
    """A run id a person chose: in the id grammar (it names folders) and not taken — reusing
    one would silently attach the new task to the old run."""
    check_chosen_run_id(run_id, option)
    old = RunStore(ws.engine).get(run_id)
    if old is not None:
        raise BadInput(f"{option}: run {run_id!r} already exists ({old['status']}); choose another id, "
                       f"or continue it with `trainteam runs resume {run_id}`")
    return run_id


@dataclass(frozen=True)
class NewRun:
    """A run that passed every check and may start: its workspace, spec, task and id."""

    ws: Any
    spec: WorkflowSpec
    task: TrainTask
    run_id: str


def prepare_run(workflow: str, task: TrainTask, source: str, run_id: str | None, option: str,
                open_workspace: Callable[[], Any]) -> NewRun:
    """Everything knowable before a run exists, in order: the spec, the task, a chosen id's
    grammar; only then is the workspace opened (a bad input changes nothing) and a chosen id
    checked against it. ``option`` names the id's field in errors (``--run-id``, ``run_id``)."""
    spec = load_builtin(workflow)
    check_runnable(spec, task, source)
    if run_id is not None:
        check_chosen_run_id(run_id, option)
    ws = open_workspace()
    run_id = check_new_run_id(ws, run_id, option) if run_id is not None else new_run_id(task.name)
    return NewRun(ws, spec, task, run_id)


def run_foreground(ws, spec: WorkflowSpec, task: TrainTask, run_id: str, progress: bool = True) -> dict:
    from trainteam.workflows import engine

    engine.launch(ws, progress)
    try:
        return _result(engine.start(ws, spec, task, run_id), run_id)
    finally:
        engine.shutdown()


def _result(handle, run_id: str) -> dict:
    """The run's end: a completed run's return value, or what a stopped one raised (DBOS
    records a failed run as ERROR and a cancelled one as CANCELLED)."""
    from dbos._error import DBOSAwaitedWorkflowCancelledError

    try:
        return handle.get_result()
    except RunStopped as stopped:
        return stopped.result
    except DBOSAwaitedWorkflowCancelledError:
        return {"run_id": run_id, "status": "cancelled", "error": "cancelled by a person"}


def resume_foreground(ws, run_id: str, force: bool = False, progress: bool = True) -> dict:
    from trainteam.workflows import engine

    engine.launch(ws, progress)
    try:
        return _result(engine.resume(ws, run_id, force=force), run_id)
    finally:
        engine.shutdown()


def serve(ws, once: bool = False, poll_s: float = 5.0, progress: bool = True) -> None:
    """A worker: resumes runs whose process died, at start and then every ``poll_s``.
    With ``once`` it waits for the runs it resumed and returns."""
    from dbos import DBOS

    from trainteam.workflows import engine

    engine.launch(ws, progress)
    try:
        resumed = engine.recover_orphans(ws)
        if resumed:
            engine.console.print(f"resuming {len(resumed)} run(s): {', '.join(resumed)}")
        if once:
            for run_id in resumed:
                _result(DBOS.retrieve_workflow(run_id), run_id)
            return
        while True:
            time.sleep(poll_s)
            engine.recover_orphans(ws)
    finally:
        engine.shutdown()
