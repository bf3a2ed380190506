"""The approval queue: gated actions wait here for a person.

Two sides:
- the *workflow side* (``request``/``read_decision``) runs inside DBOS steps of a run;
- the *human side* (``decide``) runs in any other process (CLI, Python). It writes
  the decision to the database first — the single source of truth the waiting run
  re-reads — then wakes the run with a DBOS message.

No agent tool is given ``decide``: it is reachable only from the human channel
(``trainteam approvals approve|reject`` or this function called by a person's code).
A message that does not match a recorded decision is ignored by the waiting run.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from trainteam.contract.redaction import redact_text
from trainteam.core.errors import BadInput, Conflict, NotFound
from trainteam.graph.record import record_approval, record_approval_request
from trainteam.workflows.engine.approval_ids import approval_public, resolve
from trainteam.workflows.engine.store import ApprovalStore, RunStore

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from trainteam.graph.knowledge import KnowledgeGraph

TOPIC_PREFIX = "approval:"


class EngineSettings(Protocol):
    """The settings the engine reads (``trainteam.settings.Settings``)."""

    @property
    def app_version(self) -> str: ...

    @property
    def notification_polling_s(self) -> float: ...

    @property
    def approval_wait_s(self) -> float: ...


class EngineWorkspace(Protocol):
    """What the engine and the approval queue use of their workspace, ``trainteam.workspace.Workspace``: the shell,
    above this room, so not imported here. It covers ``step_io.WorkspaceLike``: each step gets it as its
    ``ToolContext.ws``."""

    root: Path

    def dir(self, kind: str) -> Path: ...

    @property
    def graph(self) -> KnowledgeGraph: ...

    @property
    def engine(self) -> Engine: ...

    @property
    def dbos_database_url(self) -> str: ...

    @property
    def settings(self) -> EngineSettings: ...

    def check_dbos_database(self) -> None: ...


def approval_topic(approval_id: str) -> str:
    return TOPIC_PREFIX + approval_id


def request(
    ws: EngineWorkspace,
    *,
    run_id: str,
    step: str,
    visit: int,
    action: str,
    proposed: dict,
    evidence: dict,
    requested_by: str,
) -> dict[str, Any]:
    """Open (or, after a crash, find again) the approval for this step visit."""
    approval_id = f"{run_id}.{step}.{visit}.{action}"
    row = ApprovalStore(ws.engine).create(
        approval_id=approval_id,
        run_id=run_id,
        step=step,
        action=action,
        proposed=proposed,
        evidence=evidence,
        requested_by=requested_by,
    )
    record_approval_request(
        ws.graph,
        approval_id,
        run_id=run_id,
        step=step,
        visit=visit,
        action=action,
        proposed=proposed,
        requested_by=requested_by,
    )
    return row


def read_decision(ws: EngineWorkspace, approval_id: str) -> dict[str, Any]:
    row = ApprovalStore(ws.engine).get(approval_id)
    if row is None:
        raise NotFound(f"approval {approval_id!r} not found")
    return {"id": row["id"], "status": row["status"], "decided_by": row["decided_by"], "note": row["note"]}


def _decider(by: str | None) -> str | None:
    """Who decides, as recorded in the queue and the graph: a name, not a key or a paragraph."""
    if by is None:
        return None
    if not by.strip() or len(by) > 128 or any(ord(ch) < 32 for ch in by):
        raise BadInput("--by: a person's name, 1 to 128 printable characters")
    if redact_text(by) != by:
        raise BadInput(f"--by: {by[:8]}… looks like a secret key, not a person's name")
    return by


def _note(note: str | None) -> str | None:
    if note is not None and len(note) > 4000:
        raise BadInput(f"--note: {len(note)} characters; at most 4000")
    return None if note is None else redact_text(note)


def decide(
    ws: EngineWorkspace, ref: str, *, approve: bool, by: str | None = None, note: str | None = None
) -> dict[str, Any]:
    """A person's decision. Final: deciding the same approval again is an error."""
    by, note = _decider(by), _note(note)
    store = ApprovalStore(ws.engine)
    row = resolve(store, ref)
    if row["status"] != "pending":
        raise Conflict(
            f"approval {row['id']} was already {row['status']} by {row['decided_by']} at {row['decided_at']}"
        )
    person = by or getpass.getuser()
    status = "approved" if approve else "rejected"
    if not store.decide(row["id"], status, person, note):
        fresh = store.get(row["id"]) or {"status": "decided", "decided_by": None}
        raise Conflict(f"approval {row['id']} was already {fresh['status']} by {fresh['decided_by']}")
    record_approval(
        ws.graph,
        row["id"],
        person=person,
        approve=approve,
        note=note,
        action=row["action"],
        step=row["step"],
        run_id=row["run_id"],
    )
    _wake_run(ws, row["run_id"], row["id"], status)
    return approval_public(store.get(row["id"]) or row)


def _wake_run(ws: EngineWorkspace, run_id: str, approval_id: str, status: str) -> None:
    """Send the durable message the run waits for. If the run's process is gone the
    message waits in the system database and is delivered when the run resumes."""
    from dbos import DBOSClient  # imported here: ~1 s, only when a decision is made

    client = DBOSClient(system_database_url=ws.dbos_database_url)
    try:
        client.send(
            run_id,
            {"approval_id": approval_id, "status": status},
            topic=approval_topic(approval_id),
            idempotency_key=f"decision:{approval_id}",
        )
    finally:
        client.destroy()


def cancel_run(ws: EngineWorkspace, run_id: str) -> list[str]:
    """Cancel a run in the engine, expire its open approvals and wake it if it waits for one
    (the wake-up makes it reach its next step, where the engine stops it)."""
    from dbos import DBOSClient

    store = ApprovalStore(ws.engine)
    pending = store.list("pending", run_id)
    client = DBOSClient(system_database_url=ws.dbos_database_url)
    try:
        # marked cancelled here first: a worker handing the run back meanwhile reads it and cancels it again
        # (``Engine._hand_back``)
        RunStore(ws.engine).set_status(run_id, "cancelled", error="cancelled by a person")
        client.cancel_workflow(run_id)
        for row in pending:
            store.decide(row["id"], "expired", getpass.getuser(), "run cancelled")
            client.send(
                run_id,
                {"approval_id": row["id"], "status": "expired"},
                topic=approval_topic(row["id"]),
                idempotency_key=f"cancel:{row['id']}",
            )
    finally:
        client.destroy()
    return [r["id"] for r in pending]
