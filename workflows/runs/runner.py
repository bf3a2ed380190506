"""Check, start, resume and serve runs in this process (the long-running side).

``prepare_run`` is the one way a new run is checked before anything is written (the CLI's
``execute-workflow`` and the Python ``execute_workflow`` both call it); ``run_foreground``
then runs it here, the engine launched with the step tools (``steps.STEPS``). The engine
(``workflows/engine/durable.py``, which imports DBOS, ~1 s) is imported only when a run starts: short commands
that only check stay fast.
"""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from trainteam.contract.redaction import redact_text, redacted_task
from trainteam.contract.train_task import TrainTask
from trainteam.core.errors import BadInput, RunStopped
from trainteam.core.ids import check_run_id
from trainteam.workflows.engine.executors import APP_NAME, RUN_QUEUE, WORKFLOW_NAME
from trainteam.workflows.engine.spec import WorkflowSpec, load_builtin
from trainteam.workflows.engine.store import RunStore
from trainteam.workflows.steps import STEPS
from trainteam.workflows.task.preflight import check_runnable

GENERATED_RUN_ID = re.compile(r"-\d{8}-\d{6}-[0-9a-f]{4}$")  # the end of every id ``new_run_id`` makes


def new_run_id(task_name: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return f"{task_name[:24]}-{stamp}-{secrets.token_hex(2)}"


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
        raise BadInput(
            f"{option}: run {run_id!r} already exists ({old['status']}); choose another id, "
            f"or continue it with `trainteam runs resume {run_id}`"
        )
    return run_id


@dataclass(frozen=True)
class NewRun:
    """A run that passed every check and may start: its workspace, spec, task and id."""

    ws: Any
    spec: WorkflowSpec
    task: TrainTask
    run_id: str


def prepare_run(
    workflow: str, task: TrainTask, source: str, run_id: str | None, option: str, open_workspace: Callable[[], Any]
) -> NewRun:
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
    from trainteam.workflows.engine.durable import Engine

    engine = Engine.launch(ws, STEPS, progress)
    try:
        return _result(engine.start(spec, task, run_id), run_id)
    finally:
        engine.shutdown()


def _result(handle, run_id: str) -> dict:
    """The run's end: a completed run's return value, or what a stopped one raised (DBOS
    records a failed run as ERROR and a cancelled one as CANCELLED)."""
    from dbos import error as dbos_error

    try:
        return handle.get_result()
    except RunStopped as stopped:
        return stopped.result
    except dbos_error.DBOSAwaitedWorkflowCancelledError:
        return {"run_id": run_id, "status": "cancelled", "error": "cancelled by a person"}


def resume_foreground(ws, run_id: str, force: bool = False, progress: bool = True) -> dict:
    from trainteam.workflows.engine.durable import Engine

    engine = Engine.launch(ws, STEPS, progress)
    try:
        return _result(engine.resume(run_id, force=force), run_id)
    finally:
        engine.shutdown()


@dataclass(frozen=True)
class WorkerLimits:
    """How many runs a worker takes at once (``worker_concurrency``: one, since a run trains
    with every core it is given and the engine's process state is one run's), and how many all
    workers together (``global_concurrency``: no limit unless given). Stored with the queue in
    the system database: the last worker started sets them for all. ``poll_s``: how often a
    worker looks at the queue, and for runs of dead processes."""

    worker_concurrency: int = 1
    global_concurrency: int | None = None
    poll_s: float = 1.0


def enqueue_run(new: NewRun) -> None:
    """Put a checked run on the run queue for workers, without launching the engine here (a
    short command: DBOS's client writes the queued row; ``DBOS.migrate`` creates DBOS's
    tables in a new workspace)."""
    from dbos import DBOS, DBOSClient

    task_data = redacted_task(new.task.stored())
    RunStore(new.ws.engine).create(new.run_id, new.spec.name, task_data)
    DBOS.migrate(new.ws.dbos_database_url)
    client = DBOSClient(system_database_url=new.ws.dbos_database_url, application_name=APP_NAME)
    try:
        client.enqueue(
            {
                "workflow_name": WORKFLOW_NAME,
                "queue_name": RUN_QUEUE,
                "workflow_id": new.run_id,
                "app_version": new.ws.settings.app_version,
                "application_name": APP_NAME,
            },
            new.run_id,
            new.spec.model_dump(mode="json", by_alias=True),
            task_data,
        )
    finally:
        client.destroy()


def serve(ws, once: bool = False, limits: WorkerLimits = WorkerLimits(), progress: bool = True) -> None:
    """A worker: takes runs from the run queue (DBOS dequeues them under ``limits``) and, every
    ``limits.poll_s``, hands runs whose process died back to the queue (``Engine.recover_dead``).
    With ``once`` it returns when the queue is empty and its own runs have ended."""
    from trainteam.workflows.engine.durable import Engine, console

    engine = Engine.launch(ws, STEPS, progress, worker=True)
    try:
        engine.register_queue(limits.worker_concurrency, limits.global_concurrency, limits.poll_s)
        console.print(
            f"worker {engine.executor_id}: taking runs from queue {RUN_QUEUE} "
            f"({limits.worker_concurrency} at a time here"
            + (f", {limits.global_concurrency} in all" if limits.global_concurrency else "")
            + ")",
            highlight=False,
        )
        idle = 0
        while True:
            resumed = engine.recover_dead()
            if resumed:
                console.print(
                    f"resuming {len(resumed)} run(s) of dead processes: {', '.join(resumed)}", highlight=False
                )
            time.sleep(limits.poll_s)
            # two quiet looks in a row: a run just claimed is PENDING here before the next look
            idle = idle + 1 if once and not engine.queue_busy() else 0
            if idle >= 2:
                return
    finally:
        engine.shutdown()
