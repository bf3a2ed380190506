"""Runs queued with --detach are taken by `trainteam worker` processes sharing one Postgres database;
a worker killed with SIGKILL mid-run loses nothing: another takes its run, and every run completes once.

Real processes on a real PostgreSQL server (tests/pg_server.py). The killed worker holds a run that
waits for a person (an approval opened, DBOS parked in recv): the kill is certain to land mid-run,
and the decision, made while no process runs it, reaches the run in the other worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

from spine_helpers import DATA, TINY_TASK, _env, cli, pending_approvals, run_view, wait_for

SPEC = str(DATA / "prep_only.yaml")
RUNS = ["q0", "q1", "q2", "q3"]  # q0 asks for a person's go-ahead before its step


def _worker(ws: Path, logs: Path, name: str) -> subprocess.Popen:
    with open(logs / f"{name}.err", "w") as err:
        return subprocess.Popen([sys.executable, "-m", "trainteam.cli", "-w", str(ws), "worker", "--poll", "0.2"],
                                stdout=subprocess.DEVNULL, stderr=err, env=_env(), start_new_session=True)


def _dbos_steps(url: str, run_id: str) -> list[str]:
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=url)
    try:
        return [s["function_name"] for s in client.list_workflow_steps(run_id)]
    finally:
        client.destroy()


def test_two_workers_share_the_queue_and_a_killed_workers_run_completes_once(tmp_path, ws, pg_server, monkeypatch):
    import trainteam

    url = pg_server.new_database()
    monkeypatch.setenv("TRAINTEAM_DATABASE_URL", url)
    monkeypatch.setenv("TRAINTEAM_DBOS_DATABASE_URL", url)
    for run_id in RUNS:  # the Python face of `execute-workflow --detach`
        task = {**TINY_TASK, "workflow": "prep_only", "require_approval": ["prepare_corpus"] if run_id == "q0" else []}
        view = trainteam.execute_workflow(SPEC, task, workspace=ws, run_id=run_id, detach=True)
        assert view["status"] == "pending" and view["steps"] == []
    logs = tmp_path / "logs"
    logs.mkdir()
    workers = {name: _worker(ws, logs, name) for name in ("a", "b")}
    try:
        pending = wait_for(lambda: pending_approvals(ws), timeout=600, what="q0's approval")
        owner = run_view(ws, "q0")["executor_id"]
        killed = next(n for n, p in workers.items() if owner.split(":")[1] == str(p.pid))
        os.killpg(workers[killed].pid, signal.SIGKILL)
        workers[killed].wait(timeout=10)
        cli(ws, "approvals", "approve", pending[0]["id"], "--by", "erin", check=True)  # while no process runs q0

        def all_done():
            views = {r: run_view(ws, r) for r in RUNS}
            assert not [v for v in views.values() if v["status"] in ("failed", "cancelled")], views
            return views if all(v["status"] == "completed" for v in views.values()) else None

        views = wait_for(all_done, timeout=600, interval=0.2, what="every queued run completed")
    finally:
        for p in workers.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)
    survivor = next(n for n in workers if n != killed)
    survivor_pid = str(workers[survivor].pid)
    err = (logs / f"{survivor}.err").read_text()
    assert "resuming 1 run(s) of dead processes: q0" in err, err[-2000:]
    for run_id, view in views.items():
        # the step ran once, its DBOS records once each, and the survivor finished every run
        assert [(s["name"], s["status"], s["attempts"]) for s in view["steps"]] == [("prepare_corpus", "completed", 1)]
        steps = _dbos_steps(url, run_id)
        assert steps and max(Counter(steps).values()) == 1, steps
        assert view["executor_id"].split(":")[1] == survivor_pid, (run_id, view["executor_id"])
        assert f"[{run_id}]" in err  # its lines on the worker's stderr carry the run id
        assert (ws / "logs" / "runs" / f"{run_id}.log").read_text().strip().endswith(f"run {run_id} completed")
    assert views["q0"]["approvals"][0]["decided_by"] == "erin"
