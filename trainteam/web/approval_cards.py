"""The approvals page's data: each approval as ``workflows.evidence.ApprovalView`` (the typed
registration, spike and budget evidence ``approvals show`` prints), and the stored evidence those
typed sections leave out, which the page shows as it is."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from trainteam.workflows.engine.approval_ids import resolve
from trainteam.workflows.engine.store import ApprovalStore
from trainteam.workflows.report.evidence import ApprovalView, approval_evidence_view

# the stored evidence keys each typed section shows (the rest is drawn generically)
REGISTER_KEYS = {"register_model"}
SPIKE_KEYS = {"monitor", "curve"}
BUDGET_KEYS = {"spent", "budget", "allowed_minutes", "where", "overrun_s"}


class ApprovalCard(BaseModel):
    """One approval on the page: its typed view and the evidence no typed section shows."""

    view: ApprovalView
    other_evidence: dict[str, Any] = Field(default_factory=dict)


def card(row: dict[str, Any]) -> ApprovalCard:
    view = approval_evidence_view(row)
    shown: set[str] = set()
    for section, keys in ((view.registration, REGISTER_KEYS), (view.spike, SPIKE_KEYS), (view.budget, BUDGET_KEYS)):
        if section is not None:
            shown |= keys
    return ApprovalCard(view=view, other_evidence={k: v for k, v in view.evidence.items() if k not in shown})


def all_cards(ws) -> tuple[list[ApprovalCard], list[ApprovalCard]]:
    """(the pending approvals, oldest first; the decided ones, latest decision first)."""
    cards = [card(r) for r in ApprovalStore(ws.engine).list()]
    pending = [c for c in cards if c.view.status == "pending"]
    done = sorted((c for c in cards if c.view.status != "pending"), key=lambda c: c.view.decided_at or "", reverse=True)
    return pending, done


def one_card(ws, ref: str) -> ApprovalCard:
    """The approval ``ref`` names (its short id, a unique prefix or its id); NotFound or BadInput."""
    return card(resolve(ApprovalStore(ws.engine), ref))
