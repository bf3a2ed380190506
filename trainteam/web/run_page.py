"""What the console's run page shows, read from the run store, the knowledge graph and the run's files.

Typed views (pydantic) between the stores and the templates: the steps timeline with each step's
persona, its decisions (the graph's Decision nodes) and its approvals; the recipe search of each searched
stage (its Decision node, there as soon as the search chose, before the stage trains); evals and gates;
the report's plots (``<workspace>/reports/<run>/*.png``); the transcripts (``agents/transcripts.py``).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel

from trainteam.agents.transcripts import read_run, tool_calls
from trainteam.core.errors import NotFound
from trainteam.workflows.engine.store import ApprovalStore, RunStore
from trainteam.workflows.report.views import ACTIVE, run_searches, run_view, runs_view, search_public

PLOT_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,80}\.png$")


class DecisionView(BaseModel):
    node: str
    step: str | None
    summary: str
    by: str | None = None
    at: str


class StepApproval(BaseModel):
    """An approval on a step's line: what was asked, where it stands, who decided it."""

    id: str
    action: str
    status: str
    decided_by: str | None = None
    decided_at: str | None = None
    note: str | None = None


class StepView(BaseModel):
    name: str
    visit: int
    persona: str | None
    status: str
    attempts: int
    started_at: str | None
    seconds: float | None
    error: str | None
    summary: str = ""
    decisions: list[DecisionView] = []
    approvals: list[StepApproval] = []


class RunRow(BaseModel):
    run_id: str
    workflow: str
    task_name: str
    status: str
    current_step: str | None
    created_at: str
    age: str
    live: bool
    pending_approvals: int = 0


class EvalView(BaseModel):
    node: str
    stage: str | None
    metrics: dict[str, Any]
    n_eval: Any = None


class GateView(BaseModel):
    node: str
    stage: str | None
    passed: bool | None
    reasons: list[str]
    accepted_by: str | None = None


class ProbeRow(BaseModel):
    """One probe of a search: its rate, what it measured at each of the search's rungs, where it ended."""

    trial: int
    lr: str
    cells: list[str]
    status: str


class ComparisonRow(BaseModel):
    step: int
    ranked_by: str
    reason: str
    outcome: str


class SearchView(BaseModel):
    """A stage's recipe search as the run page shows it (``views.search_public``)."""

    stage: str
    objective: str
    prior: str
    rungs: list[int]
    probes: list[ProbeRow]
    comparisons: list[ComparisonRow]
    chosen: str
    reason: str


class RunPage(BaseModel):
    run: RunRow
    error: str | None
    metrics: dict[str, Any]
    steps: list[StepView]
    searches: list[SearchView] = []
    sealed_test: dict[str, Any] | None = None
    evals: list[EvalView]
    gates: list[GateView]
    decisions: list[DecisionView]
    plots: list[str]
    transcripts: int


def age(stamp: str | None, now: datetime | None = None) -> str:
    if not stamp:
        return "?"
    seconds = ((now or datetime.now(UTC)) - datetime.fromisoformat(stamp)).total_seconds()
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{max(seconds, 0):.0f} s"


def _row(view: dict[str, Any], pending: int = 0) -> RunRow:
    return RunRow(
        run_id=view["run_id"],
        workflow=view["workflow"],
        task_name=view["task_name"],
        status=view["status"],
        current_step=view["current_step"],
        created_at=view["created_at"],
        age=age(view["created_at"]),
        live=bool(view["process_alive"]) and view["status"] in ACTIVE,
        pending_approvals=pending,
    )


def runs_list(ws, limit: int = 100) -> list[RunRow]:
    pending: dict[str, int] = {}
    for a in ApprovalStore(ws.engine).list("pending"):
        pending[a["run_id"]] = pending.get(a["run_id"], 0) + 1
    return [_row(v, pending.get(v["run_id"], 0)) for v in runs_view(RunStore(ws.engine), limit)]


def _run_nodes(ws, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [
        n
        for n in ws.graph.nodes(kind)
        if n.get("run_id") == run_id or (kind == "Decision" and str(n.get("approval", "")).startswith(f"{run_id}."))
    ]


def _decision(node: dict[str, Any]) -> DecisionView:
    if node.get("approval"):  # a person's decision on an approval
        summary = f"{node.get('status')} by {node.get('by')}" + (f": {node['note']}" if node.get("note") else "")
        step = str(node["approval"]).split(".")[1] if str(node["approval"]).count(".") >= 2 else None
        return DecisionView(node=node["id"], step=step, summary=summary, by=node.get("by"), at=node["created_at"])
    summary = str(node.get("summary") or node.get("decision") or node.get("verdict") or "")
    return DecisionView(
        node=node["id"],
        step=node.get("step"),
        summary=summary,
        by=node.get("persona") or node.get("decided_by"),
        at=node["created_at"],
    )


def _steps(
    runs: RunStore, approvals: list[dict[str, Any]], decisions: list[DecisionView], run_id: str
) -> list[StepView]:
    outputs = {(a["step"], a["visit"]): a.get("output") or {} for a in runs.attempts(run_id)}
    steps: list[StepView] = []
    for s in runs.steps_summary(run_id):
        out = outputs.get((s["name"], s["visit"])) or {}
        steps.append(
            StepView(
                name=s["name"],
                visit=s["visit"],
                persona=s["persona"],
                status=s["status"],
                attempts=s["attempts"],
                started_at=s.get("started_at"),
                seconds=s.get("seconds"),
                error=s.get("error"),
                summary=str(out.get("summary") or "") if isinstance(out, dict) else "",
                decisions=[d for d in decisions if d.step == s["name"]],
                approvals=[StepApproval.model_validate(a) for a in approvals if a["step"] == s["name"]],
            )
        )
    return steps


def _lr(rate: Any) -> str:
    return f"{rate:.3g}" if isinstance(rate, (int, float)) else "?"


def search_view(found: dict[str, Any]) -> SearchView:
    """A search (``views.search_public``) as rows: a probe per row, a rung per column (gate metric / held-out loss)."""
    rungs = sorted({int(s) for p in found["probes"] for s in p["heldout_loss"]})
    chosen = found.get("chosen") or {}
    by_trial = {p["trial"]: p for p in found["probes"]}

    def cell(p: dict[str, Any], step: int) -> str:
        loss, metric = (
            p["heldout_loss"].get(str(step), p["heldout_loss"].get(step)),
            p["metric"].get(str(step), p["metric"].get(step)),
        )
        if loss is None:
            return ""
        return (f"{metric:.3f} / " if metric is not None else "") + f"{loss:.4f}"

    def status(p: dict[str, Any]) -> str:
        if chosen and chosen.get("learning_rate") == p["learning_rate"] and not p["unstable"]:
            return "chosen"
        return "unstable" if p["unstable"] else "stopped" if p["pruned"] else "widened" if p["widened"] else ""

    def outcome(c: dict[str, Any]) -> str:
        rates = ", ".join(f"lr {_lr(by_trial.get(t, {}).get('learning_rate'))}" for t in c.get("going_on") or [])
        return f"{c.get('outcome') or 'went on'}: {rates}" if rates else ""

    comparisons = [
        ComparisonRow(step=c["step"], ranked_by=c["ranked_by"], reason=c.get("reason", ""), outcome=outcome(c))
        for c in found.get("comparisons") or []
    ]
    return SearchView(
        stage=str(found.get("stage")),
        objective=str(found.get("objective") or "heldout_loss"),
        prior=str(found.get("prior") or ""),
        rungs=rungs,
        comparisons=comparisons,
        probes=[
            ProbeRow(trial=p["trial"], lr=_lr(p["learning_rate"]), cells=[cell(p, r) for r in rungs], status=status(p))
            for p in found["probes"]
        ],
        chosen=_lr(chosen.get("learning_rate")) if chosen else "",
        reason=str(found.get("choice_reason") or ""),
    )


def searches(ws, runs: RunStore, run_id: str) -> list[SearchView]:
    """Each searched stage's search: from its Decision node (there once the search chose), else the step's output."""
    found = run_searches(runs, run_id)
    for node in _run_nodes(ws, run_id, "Decision"):
        if node.get("decision") == "recipe" and isinstance(node.get("report"), dict):
            found[str(node.get("stage"))] = search_public(node["report"])
    return [search_view(v) for v in found.values()]


def plots(ws, run_id: str) -> list[str]:
    folder = ws.dir("reports") / run_id
    return sorted(p.name for p in folder.glob("*.png") if PLOT_NAME.match(p.name)) if folder.is_dir() else []


def run_page(ws, run_id: str) -> RunPage:
    runs, store = RunStore(ws.engine), ApprovalStore(ws.engine)
    view = run_view(runs, store, run_id)
    approvals = store.list(run_id=run_id)
    decisions = sorted((_decision(n) for n in _run_nodes(ws, run_id, "Decision")), key=lambda d: d.at)
    evals = [
        EvalView(node=n["id"], stage=n.get("stage"), metrics=n.get("metrics") or {}, n_eval=n.get("n_eval"))
        for n in _run_nodes(ws, run_id, "Eval")
    ]
    gates = [
        GateView(
            node=n["id"],
            stage=n.get("stage"),
            passed=n.get("passed"),
            reasons=list(n.get("reasons") or []),
            accepted_by=n.get("accepted_by"),
        )
        for n in _run_nodes(ws, run_id, "Gate")
    ]
    folder = ws.dir("transcripts") / run_id
    return RunPage(
        run=_row(view, sum(a["status"] == "pending" for a in approvals)),
        error=view["error"],
        metrics=view["metrics"] or {},
        steps=_steps(runs, approvals, decisions, run_id),
        searches=searches(ws, runs, run_id),
        sealed_test=view.get("sealed_test"),
        evals=evals,
        gates=gates,
        decisions=decisions,
        plots=plots(ws, run_id),
        transcripts=len(list(folder.glob("*.json"))) if folder.is_dir() else 0,
    )


class TranscriptView(BaseModel):
    segment: str
    step: str | None
    persona: str | None
    model: str | None
    status: str | None
    calls: list[dict[str, Any]]
    messages: list[dict[str, Any]]


def transcripts(ws, run_id: str) -> list[TranscriptView]:
    """The run's transcripts (already redacted when written); none yet is an empty list."""
    try:
        records = read_run(ws, run_id)
    except NotFound:
        return []
    return [
        TranscriptView(
            segment=r.get("segment", "?"),
            step=r.get("step"),
            persona=r.get("persona"),
            model=r.get("model"),
            status=r.get("status"),
            calls=tool_calls(r),
            messages=r.get("messages", []),
        )
        for r in records
    ]
