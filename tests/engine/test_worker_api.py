"""A worker resumes orphaned runs; the Python API does what the CLI does; short commands stay light."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from spine_helpers import DATA, TINY_TASK, cli, pending_approvals, run_view, spawn, wait_for, write_task


def test_worker_resumes_a_run_whose_process_died(tmp_path, ws, database):
    task = write_task(tmp_path, workflow="prep_only", require_approval=["prepare_corpus"])
    run = spawn(ws, "execute-workflow", str(DATA / "prep_only.yaml"), "--task", str(task), "--run-id", "orphan")
    pending = wait_for(lambda: pending_approvals(ws), what="a pending approval")
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=10)
    import trainteam

    trainteam.approve(pending[0]["id"], by="dana", workspace=ws)  # the Python face of the human channel
    proc = cli(ws, "worker", "--once", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert "orphan" in proc.stderr
    assert run_view(ws, "orphan")["status"] == "completed"


def test_python_api_runs_a_workflow_in_process(tmp_path, ws):
    import trainteam

    spec_task = {**TINY_TASK, "workflow": "prep_only"}
    view = trainteam.graph_orchestrate(action="execute_workflow", name=str(DATA / "prep_only.yaml"),
                                       task=spec_task, workspace=ws, run_id="py1", progress=False)
    assert view["status"] == "completed" and view["steps"][0]["name"] == "prepare_corpus"
    assert trainteam.get_run("py1", workspace=ws)["metrics"]["prepare_corpus.n_train"] == 400


def test_short_commands_import_no_torch_and_no_dbos(ws, tmp_path):
    probe = ("import sys\n"
             "from trainteam.cli import main\n"
             "try:\n    main(sys.argv[1:])\n"
             "except SystemExit:\n    pass\n"
             "print('HEAVY', sorted(m for m in ('torch', 'transformers', 'dbos', 'trl') if m in sys.modules))\n")
    for args in (["approvals", "list"], ["runs", "list"], ["workflows", "show", "train_model"], ["graph", "nodes"]):
        out = subprocess.run([sys.executable, "-c", probe, "-w", str(ws), *args], capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip().splitlines()[-1] == "HEAVY []", (args, out.stdout[-300:])


def _killed_waiting_run(tmp_path, ws, run_id: str) -> None:
    """A run whose process died while it waited for a person: PENDING in DBOS under a dead executor."""
    task = write_task(tmp_path, workflow="prep_only", require_approval=["prepare_corpus"])
    run = spawn(ws, "execute-workflow", str(DATA / "prep_only.yaml"), "--task", str(task), "--run-id", run_id)
    wait_for(lambda: pending_approvals(ws), what="a pending approval")
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=10)


def _dbos_status(ws, run_id: str) -> str:
    from dbos import DBOSClient

    from trainteam.workspace import Workspace

    client = DBOSClient(system_database_url=Workspace.open(ws).dbos_database_url)
    try:
        return client.retrieve_workflow(run_id).get_status().status
    finally:
        client.destroy()


def test_a_run_cancelled_while_its_worker_was_dead_stays_cancelled(tmp_path, ws, database):
    # The person's cancel marks the run cancelled in trainteam's store, then in DBOS. A worker handing the dead
    # executor's run back between the two (here: the store marked, DBOS not yet) reads the mark and cancels the
    # run it queued: the run never goes on.
    from trainteam.workflows.engine.store import RunStore
    from trainteam.workspace import Workspace

    _killed_waiting_run(tmp_path, ws, "cancelled-orphan")
    RunStore(Workspace.open(ws).engine).set_status("cancelled-orphan", "cancelled", error="cancelled by a person")
    proc = cli(ws, "worker", "--once", timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert _dbos_status(ws, "cancelled-orphan") == "CANCELLED"
    assert run_view(ws, "cancelled-orphan")["status"] == "cancelled"


def test_one_worker_claims_a_dead_executors_run_and_another_only_once_that_one_died(ws, database):
    from sqlalchemy import create_engine
    from sqlalchemy.pool import NullPool

    from trainteam.workflows.engine.executors import Lease
    from trainteam.workflows.engine.store import RunStore
    from trainteam.workspace import Workspace

    engine = Workspace.open(ws).engine
    runs = RunStore(engine)
    # each worker's lease on a connection of its own, closed for good on release (a process that dies)
    leases = create_engine(engine.url.render_as_string(hide_password=False), poolclass=NullPool)
    a, b = Lease.hold(leases, "host:1:a"), Lease.hold(leases, "host:2:b")
    try:
        assert runs.claim_handback("r1", "host:0:dead", "host:1:a")
        assert not runs.claim_handback("r1", "host:0:dead", "host:2:b")  # a lives: its claim stands
        assert runs.claim_handback("r1", "host:0:dead", "host:1:a")  # a's own retry
        assert runs.claim_handback("r1", "host:0:other", "host:2:b")  # another death, another claim
        a.release()
        assert runs.claim_handback("r1", "host:0:dead", "host:2:b")  # a died before handing it back: b takes over
        assert not runs.claim_handback("r1", "host:0:dead", "host:3:c")  # b lives
    finally:
        a.release()
        b.release()
