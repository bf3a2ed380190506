"""A worker takes as many queued runs at once as ``--concurrency`` says, and no more: with 2, two of
three queued runs are under way together (each waiting for a person's go-ahead before its step), the
third stays queued until one of them ends; ``--global-concurrency`` below it is bad input."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

from spine_helpers import DATA, TINY_TASK, _env, cli, pending_approvals, run_view, wait_for

SPEC = str(DATA / "prep_only.yaml")
RUNS = ["c0", "c1", "c2"]


def test_a_worker_runs_two_queued_runs_at_once_and_not_three(tmp_path, ws, database):
    import trainteam

    task = {**TINY_TASK, "workflow": "prep_only", "require_approval": ["prepare_corpus"]}
    for run_id in RUNS:
        trainteam.execute_workflow(SPEC, task, workspace=ws, run_id=run_id, detach=True)
    err_path = tmp_path / "worker.err"
    with open(err_path, "w") as err:
        worker = subprocess.Popen([sys.executable, "-m", "trainteam.cli", "-w", str(ws), "worker", "--poll", "0.2",
                                   "--concurrency", "2"], stdout=subprocess.DEVNULL, stderr=err, env=_env(),
                                  start_new_session=True)
    try:
        first = wait_for(lambda: (lambda p: p if len(p) == 2 else None)(pending_approvals(ws)), timeout=600,
                         what="two runs waiting at once")
        waiting = {a["run_id"] for a in first}
        (queued,) = set(RUNS) - waiting
        assert len(pending_approvals(ws)) == 2 and run_view(ws, queued)["steps"] == []  # the limit holds
        for a in first:
            cli(ws, "approvals", "approve", a["id"], "--by", "erin", check=True)
        third = wait_for(lambda: [a for a in pending_approvals(ws) if a["run_id"] == queued], timeout=600,
                         what="the third run taken once a place freed")
        cli(ws, "approvals", "approve", third[0]["id"], "--by", "erin", check=True)
        views = wait_for(lambda: (lambda v: v if all(x["status"] == "completed" for x in v.values()) else None)(
            {r: run_view(ws, r) for r in RUNS}), timeout=600, interval=0.2, what="every run completed")
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(timeout=10)
    assert {v["executor_id"] for v in views.values()} == {views["c0"]["executor_id"]}  # one worker ran them all
    assert "2 at a time here" in err_path.read_text()


def test_global_concurrency_below_the_workers_is_refused(ws):
    proc = cli(ws, "worker", "--concurrency", "2", "--global-concurrency", "1")
    assert proc.returncode == 2 and proc.stderr.strip().startswith("error: --global-concurrency: 1 is less than"), \
        proc.stderr
