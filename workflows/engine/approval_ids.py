"""An approval's identity and public shape: its short id, the reference a person types, the row as ``--json``
prints it. Light (hashlib only): the short commands and the engine read it alike."""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from trainteam.core.errors import NotFound
from trainteam.core.ids import MIN_PREFIX, check_ref

if TYPE_CHECKING:  # the types only: this module stays light (hashlib only)
    from trainteam.workflows.engine.readonly import ApprovalReader
    from trainteam.workflows.engine.store import ApprovalStore

SHORT_ID = 8  # hex digits of an approval's short id: unique among millions, shorter than any run id
_HEX = frozenset("0123456789abcdef")


def short_id(approval_id: str) -> str:
    """An approval's short id: the first ``SHORT_ID`` hex digits of its id's sha256. An approval id
    begins with its run id, so the approvals of one run share a long prefix; their hashes do not.
    Any prefix of ``id_digest`` of at least ``MIN_PREFIX`` digits names the approval while unique."""
    return id_digest(approval_id)[:SHORT_ID]


def id_digest(approval_id: str) -> str:
    return hashlib.sha256(approval_id.encode()).hexdigest()


def approval_public(row: dict[str, Any]) -> dict[str, Any]:
    """The machine-readable shape printed by ``approvals list|show --json``."""
    return {
        "id": row["id"],
        "short_id": short_id(row["id"]),
        "run_id": row["run_id"],
        "step": row["step"],
        "action": row["action"],
        "status": row["status"],
        "proposed": row["proposed"],
        "evidence": row["evidence"],
        "requested_by": row["requested_by"],
        "created_at": row["created_at"],
        "decided_by": row["decided_by"],
        "decided_at": row["decided_at"],
        "note": row["note"],
    }


def resolve(store: ApprovalStore | ApprovalReader, ref: str) -> dict[str, Any]:
    """The approval ``ref`` names: an exact id, a unique prefix of one, or a unique prefix (at
    least ``MIN_PREFIX`` digits) of a short id."""
    rows = store.find(ref)
    if not any(r["id"] == ref for r in rows) and _hex_prefix(ref):
        known = {r["id"] for r in rows}
        rows = rows + [r for r in store.list() if r["id"] not in known and id_digest(r["id"]).startswith(ref)]
    if not rows:
        raise NotFound(f"approval {ref!r} not found (see `trainteam approvals list`)")
    if len(rows) > 1:
        raise NotFound(f"approval {ref!r} is ambiguous: {', '.join(r['id'] for r in rows[:5])}")
    return rows[0]


def _hex_prefix(ref: str) -> bool:
    check_ref(ref, "approval id")
    return MIN_PREFIX <= len(ref) <= 64 and set(ref) <= _HEX
