"""Machine-readable views of runs (what ``--json`` prints). Reads the database only."""

from __future__ import annotations

from typing import Any

from trainteam.errors import NotFound
from trainteam.workflows.executors import executor_alive
from trainteam.workflows.store import ApprovalStore, RunStore

ACTIVE = ("pending", "running", "waiting_approval")


def run_public(ws, run_id: str) -> dict[str, Any]:
    runs = RunStore(ws.engine)
    row = runs.get(run_id)
    if row is None:
        raise NotFound(f"run {run_id!r} not found (see `trainteam runs list`)")
    view = _summary(row)
    view["task"] = row["task"]
    view["steps"] = runs.steps_summary(run_id)
    view["approvals"] = [
        {"id": a["id"], "step": a["step"], "action": a["action"], "status": a["status"],
         "decided_by": a["decided_by"]}
        for a in ApprovalStore(ws.engine).list(run_id=run_id)
    ]
    return view


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    view = {
        "run_id": row["run_id"], "workflow": row["workflow"], "task_name": row["task_name"],
        "status": row["status"], "current_step": row["current_step"], "error": row["error"],
        "metrics": row["metrics"], "created_at": row["created_at"], "updated_at": row["updated_at"],
        "executor_id": row["executor_id"],
    }
    # A run marked active whose process is gone is waiting for `runs resume` (or a worker).
    view["process_alive"] = executor_alive(row["executor_id"]) if row["status"] in ACTIVE else None
    return view


def runs_public(ws, limit: int = 50) -> list[dict[str, Any]]:
    runs = RunStore(ws.engine)
    out = []
    for row in runs.list(limit):
        view = _summary(row)
        view["steps"] = runs.steps_summary(row["run_id"])
        out.append(view)
    return out
