"""Read-only twins of ``RunStore`` and ``ApprovalStore`` over the stdlib ``sqlite3``.

Why: the short list/show commands read these tables on every call, and SQLAlchemy is most of
their cold start (see ``trainteam.core.dbread``). The twins run the same queries (same filters,
order and limit) and return the same row dicts, so the views built on them print the same
output; tests compare both paths on a real workspace. Writes always go through ``store.py``.

The column lists mirror the tables in ``store.py`` (a test checks they match).
"""

from __future__ import annotations

import builtins
import sqlite3
from pathlib import Path
from typing import Any

from trainteam.core.dbread import fetch
from trainteam.core.ids import check_ref, prefix_allowed
from trainteam.workflows.engine.executors import alive_sqlite

APPROVAL_STATUSES = ("pending", "approved", "rejected", "expired")
RUN_COLUMNS = (
    "run_id",
    "workflow",
    "task_name",
    "task",
    "status",
    "current_step",
    "error",
    "metrics",
    "executor_id",
    "created_at",
    "updated_at",
)
ATTEMPT_COLUMNS = (
    "id",
    "run_id",
    "step",
    "visit",
    "persona",
    "status",
    "executor_id",
    "started_at",
    "finished_at",
    "seconds",
    "output",
    "error",
)
APPROVAL_COLUMNS = (
    "id",
    "run_id",
    "step",
    "action",
    "proposed",
    "evidence",
    "requested_by",
    "created_at",
    "status",
    "decided_by",
    "decided_at",
    "note",
)
TABLES = ("runs", "step_attempts", "approvals")


def summarize_attempts(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per (step, visit): the latest attempt's status, how many attempts ran and
    the seconds they took together (a restart's work counts too)."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for a in attempts:
        key = (a["step"], a["visit"])
        entry = out.setdefault(key, {"name": a["step"], "visit": a["visit"], "persona": a["persona"], "attempts": 0})
        # a persona run paused for a person's decision and its continuation are one attempt
        entry["attempts"] += a["status"] != "needs_approval"
        entry.setdefault("started_at", a["started_at"])
        seconds = (entry.get("seconds") or 0.0) + (float(a["seconds"]) if a["seconds"] else 0.0)
        entry.update(
            status=a["status"],
            finished_at=a["finished_at"],
            error=a["error"],
            seconds=seconds if a["seconds"] or entry.get("seconds") else None,
        )
    return list(out.values())


def _select(table: str, columns: tuple[str, ...]) -> str:
    return f"SELECT {', '.join(columns)} FROM {table}"


class RunReader:
    """The reading half of ``RunStore``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def _runs(self, where: str, params: tuple) -> builtins.list[dict[str, Any]]:
        return fetch(
            self.conn,
            _select("runs", RUN_COLUMNS) + where,
            params,
            columns=RUN_COLUMNS,
            json_columns=("task", "metrics"),
        )

    def get(self, run_id: str) -> dict[str, Any] | None:
        rows = self._runs(" WHERE run_id = ?", (run_id,))
        return rows[0] if rows else None

    def list(self, limit: int = 50) -> builtins.list[dict[str, Any]]:
        return self._runs(" ORDER BY created_at DESC LIMIT ?", (limit,))

    def attempts(self, run_id: str) -> builtins.list[dict[str, Any]]:
        return fetch(
            self.conn,
            _select("step_attempts", ATTEMPT_COLUMNS) + " WHERE run_id = ? ORDER BY id",
            (run_id,),
            columns=ATTEMPT_COLUMNS,
            json_columns=("output",),
        )

    def steps_summary(self, run_id: str) -> builtins.list[dict[str, Any]]:
        return summarize_attempts(self.attempts(run_id))

    def executor_alive(self, executor_id: str | None) -> bool:
        path = self.conn.execute("PRAGMA database_list").fetchone()[2]
        return alive_sqlite(Path(path) if path else None, executor_id)


class ApprovalReader:
    """The reading half of ``ApprovalStore``."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def _approvals(self, where: str, params: tuple) -> builtins.list[dict[str, Any]]:
        return fetch(
            self.conn,
            _select("approvals", APPROVAL_COLUMNS) + where,
            params,
            columns=APPROVAL_COLUMNS,
            json_columns=("proposed", "evidence"),
        )

    def get(self, approval_id: str) -> dict[str, Any] | None:
        rows = self._approvals(" WHERE id = ?", (approval_id,))
        return rows[0] if rows else None

    def find(self, ref: str) -> builtins.list[dict[str, Any]]:
        """Exact id, or a unique prefix of one (ids are long)."""
        check_ref(ref, "approval id")
        rows = self._approvals(" WHERE substr(id, 1, ?) = ?", (len(ref), ref))  # literal and case-sensitive
        return [r for r in rows if r["id"] == ref] or (rows if prefix_allowed(ref) else [])

    def list(self, status: str | None = None, run_id: str | None = None) -> builtins.list[dict[str, Any]]:
        clauses, params = [], []
        if status:
            clauses.append("status = ?")
            params.append(status)
        if run_id:
            clauses.append("run_id = ?")
            params.append(run_id)
        where = (" WHERE " + " AND ".join(clauses)) if clauses else ""
        return self._approvals(where + " ORDER BY created_at", tuple(params))
