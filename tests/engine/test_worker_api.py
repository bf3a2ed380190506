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
