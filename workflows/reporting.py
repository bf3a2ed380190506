"""Fill the run report (``workflows.report``) from what the workspace recorded of a run.

Evaluations come from every step that recorded an Eval node and, per stage, from the
train step, which measures (and gates) each curriculum stage before the last one; the
gate thresholds and the stage table come from the task's stages, plain or curriculum.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.workflows.curriculum import curriculum_from_task
from trainteam.trainers.gates import as_rules
from trainteam.workflows.report import (
    GateOutcome,
    LossEvent,
    ReportFiles,
    ReportInput,
    StageRecord,
    StepRecord,
    write_report,
)
from trainteam.workflows.store import RunStore
from trainteam.workflows.task import TrainTask
from trainteam.workflows.views import run_public


def _latest_outputs(runs: RunStore, run_id: str) -> dict[str, dict[str, Any]]:
    """The output of each step's last finished attempt, in the order the steps ran (a failed
    attempt's too: a train step stopped by a stage's gate recorded what it measured)."""
    out: dict[str, dict[str, Any]] = {}
    for a in runs.attempts(run_id):
        if a["status"] in ("completed", "skipped", "failed") and a["output"]:
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
        for stage, metrics in (details.get("stage_evals") or {}).items():  # the train step's per-stage batteries
            evals[stage] = {k: float(v) for k, v in metrics.items()}
        for stage, g in (details.get("stage_gates") or {}).items():
            gate_outcomes[stage] = GateOutcome(passed=g["passed"], reasons=g["reasons"], accepted_by=g.get("accepted_by"))
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
    cur = curriculum_from_task(task)
    order = cur.names()
    return ReportInput(run_id=run_id, task_name=view["task_name"], status=view["status"], steps=steps,
                       stages=_stage_records(cur, view["metrics"]), losses=_in_order(losses, order), events=events,
                       evals=_in_order(evals, order), gates={s.name: as_rules(s.gates) for s in cur.stages if s.gates},
                       gate_outcomes=_in_order(gate_outcomes, order), model_id=model_id, notes=notes)


def _in_order(by_stage: dict[str, Any], order: list[str]) -> dict[str, Any]:
    """Stages in curriculum order (stored outputs come back with their keys sorted), then the rest
    (``final``) as recorded: the loss plot lays the stages out one after another in this order."""
    return {**{s: by_stage[s] for s in order if s in by_stage},
            **{k: v for k, v in by_stage.items() if k not in order}}


def _stage_records(cur, metrics: dict[str, float]) -> list[StageRecord]:
    rows = []
    for s in cur.stages:
        d = s.data
        data = "task data" if d is None else (f"demo {d.demo} ({d.n_train} train / {d.n_eval} held-out)" if d.demo
                                               else f"files {d.path.name}")
        done = next((metrics[f"{step}.{s.name}.steps"] for step in ("train", "align")
                     if f"{step}.{s.name}.steps" in metrics), None)
        cfg = s.train_config()
        rows.append(StageRecord(name=s.name, kind=s.kind, method=s.method, data=data, seq_len=cfg.seq_len,
                                steps=int(done) if done is not None else None))
    return rows


def write_run_report(ws, run_id: str, out_dir: Path | None = None) -> ReportFiles:
    return write_report(report_input(ws, run_id), out_dir or ws.dir("reports") / run_id)
