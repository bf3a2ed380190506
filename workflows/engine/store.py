"""Run, step-attempt and approval records in the workspace database.

These are the projection people read (``runs list``, ``approvals list``) without
starting the workflow engine; ``readonly.py`` holds stdlib twins of the read methods for
the short commands on a SQLite workspace. Workflow *progress* is DBOS's job; these tables
only say what happened, for humans and reports.
"""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

from sqlalchemy import Column, Integer, String, Table, Text, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from trainteam.contract.redaction import redact, redact_text
from trainteam.core.db import JSONText, metadata, utcnow
from trainteam.core.ids import check_ref, prefix_allowed
from trainteam.workflows.engine.executors import PG_ALIVE_SQL, alive_sqlite, pg_objid
from trainteam.workflows.engine.readonly import summarize_attempts

RUN_STATUSES = ("pending", "running", "waiting_approval", "completed", "failed", "cancelled")

runs_table = Table(
    "runs",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("workflow", String(64), nullable=False),
    Column("task_name", String(64), nullable=False),
    Column("task", JSONText, nullable=False),
    Column("status", String(32), nullable=False),
    Column("current_step", String(64)),
    Column("error", Text),
    Column("metrics", JSONText, nullable=False),
    Column("executor_id", String(128)),
    Column("created_at", String(40), nullable=False),
    Column("updated_at", String(40), nullable=False),
)

attempts_table = Table(
    "step_attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("step", String(64), nullable=False),
    Column("visit", Integer, nullable=False),
    Column("persona", String(32)),
    Column("status", String(32), nullable=False),  # running | completed | failed | skipped | interrupted
    Column("executor_id", String(128)),
    Column("started_at", String(40), nullable=False),
    Column("finished_at", String(40)),
    Column("seconds", Text),
    Column("output", JSONText),
    Column("error", Text),
)

approvals_table = Table(
    "approvals",
    metadata,
    Column("id", String(128), primary_key=True),
    Column("run_id", String(64), nullable=False, index=True),
    Column("step", String(64), nullable=False),
    Column("action", String(64), nullable=False),
    Column("proposed", JSONText, nullable=False),
    Column("evidence", JSONText, nullable=False),
    Column("requested_by", String(64), nullable=False),
    Column("created_at", String(40), nullable=False),
    Column("status", String(16), nullable=False),
    Column("decided_by", String(128)),
    Column("decided_at", String(40)),
    Column("note", Text),
)


handbacks_table = Table(  # which worker hands a dead executor's run back to the queue (``RunStore.claim_handback``)
    "run_handbacks",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("dead_executor", String(128), primary_key=True),
    Column("claimed_by", String(128), nullable=False),
    Column("claimed_at", String(40), nullable=False),
)


def _masked_error(values: dict[str, Any]) -> dict[str, Any]:
    """An error text goes in redacted: a provider's or a library's message may echo a key."""
    if isinstance(values.get("error"), str):
        return {**values, "error": redact_text(values["error"])}
    return values


class RunStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def executor_alive(self, executor_id: str | None) -> bool:
        """Whether the process behind ``executor_id`` still holds its lease (workflows/engine/executors.py)."""
        if not executor_id:
            return False
        if self.engine.dialect.name == "postgresql":
            with self.engine.connect() as conn:
                return bool(conn.exec_driver_sql(PG_ALIVE_SQL, (pg_objid(executor_id),)).scalar())
        db = self.engine.url.database
        return alive_sqlite(Path(db) if db else None, executor_id)

    def claim_handback(self, run_id: str, dead_executor: str, me: str) -> bool:
        """Whether the worker ``me`` hands ``run_id`` back from ``dead_executor``: one worker per death, the
        first to write the pair; another only where that one died too before it could (its lease is free)."""
        key = (handbacks_table.c.run_id == run_id, handbacks_table.c.dead_executor == dead_executor)
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    handbacks_table.insert().values(
                        run_id=run_id, dead_executor=dead_executor, claimed_by=me, claimed_at=utcnow()
                    )
                )
            return True
        except IntegrityError:
            pass
        with self.engine.connect() as conn:
            claimer = conn.execute(select(handbacks_table.c.claimed_by).where(*key)).scalar()
        if claimer is None or claimer == me:
            return claimer == me
        if self.executor_alive(claimer):
            return False
        with self.engine.begin() as conn:
            taken = conn.execute(
                update(handbacks_table)
                .where(*key, handbacks_table.c.claimed_by == claimer)
                .values(claimed_by=me, claimed_at=utcnow())
            )
        return taken.rowcount == 1

    def create(self, run_id: str, workflow: str, task: dict[str, Any]) -> None:
        now, task = utcnow(), redact(task)  # a key pasted into the task's text is never stored
        with self.engine.begin() as conn:
            exists = conn.execute(select(runs_table.c.run_id).where(runs_table.c.run_id == run_id)).first()
            if exists:
                return
            conn.execute(
                runs_table.insert().values(
                    run_id=run_id,
                    workflow=workflow,
                    task_name=task.get("name", "?"),
                    task=task,
                    status="pending",
                    metrics={},
                    created_at=now,
                    updated_at=now,
                )
            )

    def set(self, run_id: str, **values: Any) -> None:
        values = _masked_error(values)
        values["updated_at"] = utcnow()
        with self.engine.begin() as conn:
            conn.execute(update(runs_table).where(runs_table.c.run_id == run_id).values(**values))

    def set_status(self, run_id: str, status: str, *, only_if_not_final: bool = True, **values: Any) -> None:
        assert status in RUN_STATUSES, status
        query, values = update(runs_table).where(runs_table.c.run_id == run_id), _masked_error(values)
        if only_if_not_final:
            query = query.where(runs_table.c.status.notin_(["completed", "failed", "cancelled"]))
        with self.engine.begin() as conn:
            conn.execute(query.values(status=status, updated_at=utcnow(), **values))

    def merge_metrics(self, run_id: str, metrics: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            row = conn.execute(select(runs_table.c.metrics).where(runs_table.c.run_id == run_id)).first()
            merged = {**(row[0] if row else {}), **metrics}
            conn.execute(update(runs_table).where(runs_table.c.run_id == run_id).values(metrics=merged))

    def get(self, run_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(runs_table).where(runs_table.c.run_id == run_id)).mappings().first()
        return dict(row) if row else None

    def list(self, limit: int = 50) -> builtins.list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(runs_table).order_by(runs_table.c.created_at.desc()).limit(limit)).mappings()
            return [dict(r) for r in rows]

    # -- step attempts -------------------------------------------------------
    def start_attempt(self, run_id: str, step: str, visit: int, persona: str, executor_id: str) -> int:
        with self.engine.begin() as conn:
            # An attempt still marked running was cut short by a crash: say so.
            conn.execute(
                update(attempts_table)
                .where(
                    attempts_table.c.run_id == run_id,
                    attempts_table.c.step == step,
                    attempts_table.c.visit == visit,
                    attempts_table.c.status == "running",
                )
                .values(status="interrupted")
            )
            res = conn.execute(
                attempts_table.insert().values(
                    run_id=run_id,
                    step=step,
                    visit=visit,
                    persona=persona,
                    status="running",
                    executor_id=executor_id,
                    started_at=utcnow(),
                )
            )
            key = res.inserted_primary_key
            if key is None:
                raise RuntimeError(f"the database gave no id to the attempt of {step} in run {run_id}")
            return int(key[0])

    def finish_attempt(
        self, attempt_id: int, status: str, seconds: float, output: Any = None, error: str | None = None
    ) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(attempts_table)
                .where(attempts_table.c.id == attempt_id)
                .values(
                    status=status,
                    finished_at=utcnow(),
                    seconds=f"{seconds:.3f}",
                    output=redact(output),
                    error=None if error is None else redact_text(error),
                )
            )

    def attempts(self, run_id: str) -> builtins.list[dict[str, Any]]:
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(attempts_table).where(attempts_table.c.run_id == run_id).order_by(attempts_table.c.id)
            ).mappings()
            return [dict(r) for r in rows]

    def steps_summary(self, run_id: str) -> builtins.list[dict[str, Any]]:
        """One entry per (step, visit); see ``summarize_attempts``."""
        return summarize_attempts(self.attempts(run_id))


class ApprovalStore:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def create(
        self,
        *,
        approval_id: str,
        run_id: str,
        step: str,
        action: str,
        proposed: dict,
        evidence: dict,
        requested_by: str,
    ) -> dict[str, Any]:
        with self.engine.begin() as conn:
            row = conn.execute(select(approvals_table).where(approvals_table.c.id == approval_id)).mappings().first()
            if row is None:  # a step re-run after a crash must not open a second request
                conn.execute(
                    approvals_table.insert().values(
                        id=approval_id,
                        run_id=run_id,
                        step=step,
                        action=action,
                        proposed=proposed,
                        evidence=evidence,
                        requested_by=requested_by,
                        created_at=utcnow(),
                        status="pending",
                    )
                )
        created = self.get(approval_id)
        if created is None:
            raise RuntimeError(f"approval {approval_id} was written but cannot be read back")
        return created

    def get(self, approval_id: str) -> dict[str, Any] | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(approvals_table).where(approvals_table.c.id == approval_id)).mappings().first()
        return dict(row) if row else None

    def find(self, ref: str) -> builtins.list[dict[str, Any]]:
        """Exact id, or a unique prefix of one (ids are long)."""
        check_ref(ref, "approval id")
        with self.engine.connect() as conn:
            rows = [
                dict(r)
                for r in conn.execute(
                    select(approvals_table).where(approvals_table.c.id.startswith(ref, autoescape=True))
                ).mappings()
            ]
        exact = [r for r in rows if r["id"] == ref]  # LIKE ignores case on SQLite: compare here
        return exact or ([r for r in rows if r["id"].startswith(ref)] if prefix_allowed(ref) else [])

    def list(self, status: str | None = None, run_id: str | None = None) -> builtins.list[dict[str, Any]]:
        query = select(approvals_table).order_by(approvals_table.c.created_at)
        if status:
            query = query.where(approvals_table.c.status == status)
        if run_id:
            query = query.where(approvals_table.c.run_id == run_id)
        with self.engine.connect() as conn:
            return [dict(r) for r in conn.execute(query).mappings()]

    def decide(self, approval_id: str, status: str, by: str, note: str | None) -> bool:
        """Record a decision only if none exists yet. Returns False if already decided."""
        with self.engine.begin() as conn:
            res = conn.execute(
                update(approvals_table)
                .where(approvals_table.c.id == approval_id, approvals_table.c.status == "pending")
                .values(status=status, decided_by=by, decided_at=utcnow(), note=note)
            )
            return res.rowcount == 1

    def count_pending(self) -> int:
        with self.engine.connect() as conn:
            return conn.execute(
                select(func.count()).select_from(approvals_table).where(approvals_table.c.status == "pending")
            ).scalar_one()
