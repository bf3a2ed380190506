"""The approval queue across processes: a run waits durably until a person decides.

The tests taking ``database`` run twice: on SQLite and on a real PostgreSQL server (tests/conftest.py)."""

from __future__ import annotations

import json
import os
import signal

from spine_helpers import DATA, cli, pending_approvals, run_view, spawn, wait_for, write_task

SPEC = str(DATA / "prep_only.yaml")


def _start_gated_run(tmp_path, ws, run_id):
    task = write_task(tmp_path, workflow="prep_only", require_approval=["prepare_corpus"])
    return spawn(ws, "execute-workflow", SPEC, "--task", str(task), "--run-id", run_id)


def test_approve_from_another_process_resumes_the_run(tmp_path, ws, database):
    run = _start_gated_run(tmp_path, ws, "r-approve")
    wait_for(lambda: pending_approvals(ws), what="a pending approval")
    pending = json.loads(cli(ws, "approvals", "list", "--json", check=True).stdout)
    assert [(a["run_id"], a["step"], a["action"], a["status"]) for a in pending] == [
        ("r-approve", "prepare_corpus", "run_step", "pending")]
    shown = json.loads(cli(ws, "runs", "show", "r-approve", "--json", check=True).stdout)
    assert shown["status"] == "waiting_approval"
    assert shown["steps"] == []  # nothing ran before the person decided

    cli(ws, "approvals", "approve", pending[0]["id"], "--by", "alice", "--note", "go", check=True)
    assert run.wait(timeout=600) == 0, run.stderr.read()
    view = json.loads(cli(ws, "runs", "show", "r-approve", "--json", check=True).stdout)
    assert view["status"] == "completed"
    assert [(s["name"], s["status"], s["attempts"]) for s in view["steps"]] == [("prepare_corpus", "completed", 1)]
    assert view["approvals"][0]["status"] == "approved" and view["approvals"][0]["decided_by"] == "alice"

    # the decision is final and recorded in the graph
    again = cli(ws, "approvals", "reject", pending[0]["id"])
    assert again.returncode == 2 and "already approved by alice" in again.stderr
    assert len(again.stderr.strip().splitlines()) == 1
    lineage = json.loads(cli(ws, "graph", "lineage", f"Decision:approval/{pending[0]['id']}", "--json").stdout)
    kinds = {n["kind"] for n in lineage["nodes"]}
    assert {"Decision", "Person", "Approval", "Step"} <= kinds


def test_reject_stops_the_run_with_the_reason(tmp_path, ws):
    run = _start_gated_run(tmp_path, ws, "r-reject")
    pending = wait_for(lambda: pending_approvals(ws), what="a pending approval")
    cli(ws, "approvals", "reject", pending[0]["id"], "--by", "bob", "--note", "not today", check=True)
    assert run.wait(timeout=600) == 1
    view = run_view(ws, "r-reject")
    assert view["status"] == "failed"
    assert "rejected by bob" in view["error"] and "not today" in view["error"]
    assert view["steps"] == []


def test_decision_while_no_process_lives_is_delivered_at_resume(tmp_path, ws, database):
    run = _start_gated_run(tmp_path, ws, "r-crash")
    pending = wait_for(lambda: pending_approvals(ws), what="a pending approval")
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=10)
    cli(ws, "approvals", "approve", pending[0]["id"], "--by", "carol", check=True)
    view = run_view(ws, "r-crash")
    assert view["process_alive"] is False  # shown as resumable, nothing ran yet
    resumed = cli(ws, "runs", "resume", "r-crash", timeout=600)
    assert resumed.returncode == 0, resumed.stderr
    view = run_view(ws, "r-crash")
    assert view["status"] == "completed"
    assert [(s["name"], s["attempts"]) for s in view["steps"]] == [("prepare_corpus", 1)]


def test_unknown_approval_is_a_clear_error(ws):
    proc = cli(ws, "approvals", "approve", "nope")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: approval 'nope' not found (see `trainteam approvals list`)"


def test_cancel_stops_a_waiting_run_and_expires_its_approval(tmp_path, ws):
    run = _start_gated_run(tmp_path, ws, "r-cancel")
    pending = wait_for(lambda: pending_approvals(ws), what="a pending approval")
    proc = cli(ws, "runs", "cancel", "r-cancel", check=True)
    assert "1 open approval(s) expired" in proc.stdout
    assert run.wait(timeout=600) == 1
    assert "Traceback" not in run.stderr.read()
    view = run_view(ws, "r-cancel")
    assert view["status"] == "cancelled" and view["steps"] == []
    assert view["approvals"][0]["status"] == "expired"
    late = cli(ws, "approvals", "approve", pending[0]["id"])
    assert late.returncode == 2 and "already expired" in late.stderr
