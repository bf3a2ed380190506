"""Fill the run report (``workflows.report``) from what the workspace recorded of a run."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.trainers.gates import as_rules
from trainteam.workflows.report import GateOutcome, LossEvent, ReportFiles, ReportInput, StepRecord, write_report
from trainteam.workflows.store import RunStore
from trainteam.agents.task import TrainTask
from trainteam.workflows.views import run_public


def _latest_outputs(runs: RunStore, run_id: str) -> dict[str, dict[str, Any]]:
    """The output of each step's last finished attempt, in the order the steps ran."""
    out: dict[str, dict[str, Any]] = {}
    for a in runs.attempts(run_id):
        if a["status"] in ("completed", "skipped") and a["output"]:
            out.pop(a["step"], None)
            out[a["step"]] = a["output"]
    return out


def report_input(ws, run_id: str) -> ReportInput:
    view = run_public(ws, run_id)
    task = TrainTask.model_validate(view["task"])
    runs = RunStore(ws.engine)
    outputs = _latest_outputs(runs, run_id)
    price = task.budget.cost_per_hour_usd
    steps = [StepRecord(name=s["name"] + (f" #{s['visit']}" if s["visit"] > 1 else ""), persona=s["persona"],
                        status=s["status"], started=s["started_at"], finished=s["finished_at"],
                        seconds=s["seconds"], cost=(s["seconds"] or 0.0) / 3600 * price)
             for s in view["steps"]]
    losses: dict[str, list[tuple[int, float]]] = {}
    events: list[LossEvent] = []
    evals: dict[str, dict[str, float]] = {}
    gate_outcomes: dict[str, GateOutcome] = {}
    model_id = None
    for name, out in outputs.items():
        details = out.get("details") or {}
        for stage, curve in (details.get("losses") or {}).items():
            losses[stage] = [(int(s), float(v)) for s, v in curve]
        for e in details.get("events") or []:
            events.append(LossEvent(stage=e["stage"], step=int(e["step"]), kind=e["kind"], note=e.get("note", "")))
        if str((out.get("nodes") or {}).get("eval", "")).startswith("Eval:"):
            key = "final" if name == "final_eval" else details.get("stage", name)
            evals[key] = {k: float(v) for k, v in out["metrics"].items()}
        if "passed" in details and "reasons" in details:
            gate_outcomes[details["stage"]] = GateOutcome(passed=details["passed"], reasons=details["reasons"],
                                                          accepted_by=details.get("accepted_by"))
        if details.get("model_id"):
            model_id = details["model_id"]
    notes = []
    cur = outputs.get("curate")
    if cur:
        notes.append(f"curation: {cur['summary']}")
    if view["error"]:
        notes.append(f"stopped: {view['error']}")
    return ReportInput(run_id=run_id, task_name=view["task_name"], status=view["status"], steps=steps,
                       losses=losses, events=events, evals=evals,
                       gates={stage: as_rules(spec) for stage, spec in task.gates.items()},
                       gate_outcomes=gate_outcomes, model_id=model_id, notes=notes)


def write_run_report(ws, run_id: str, out_dir: Path | None = None) -> ReportFiles:
    return write_report(report_input(ws, run_id), out_dir or ws.dir("reports") / run_id)
