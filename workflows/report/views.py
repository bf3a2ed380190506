"""Machine-readable views of runs and approvals (what ``--json`` prints). Reads the database only.

The views take the stores they read from: ``RunStore``/``ApprovalStore`` (SQLAlchemy) or their
stdlib twins in ``readonly.py``, which the short commands use on a SQLite workspace. This module
imports neither at load time, so it stays cheap for those commands.
"""

from __future__ import annotations

from typing import Any

from trainteam.contract.step_outputs import SealedOutput, TrainOutput
from trainteam.core.errors import NotFound
from trainteam.core.ids import check_run_id
from trainteam.workflows.engine.readonly import summarize_attempts

ACTIVE = ("pending", "running", "waiting_approval")


def run_public(ws, run_id: str) -> dict[str, Any]:
    from trainteam.workflows.engine.store import ApprovalStore, RunStore  # SQLAlchemy: see the module docstring

    return run_view(RunStore(ws.engine), ApprovalStore(ws.engine), run_id)


def runs_public(ws, limit: int = 50) -> list[dict[str, Any]]:
    from trainteam.workflows.engine.store import RunStore  # SQLAlchemy: see the module docstring

    return runs_view(RunStore(ws.engine), limit)


def run_view(runs, approvals, run_id: str) -> dict[str, Any]:
    row = runs.get(check_run_id(run_id))
    if row is None:
        raise NotFound(f"run {run_id!r} not found (see `trainteam runs list`)")
    view = _summary(row, runs)
    view["task"] = row["task"]
    attempts = runs.attempts(run_id)  # read once: the steps and the searches
    view["steps"] = summarize_attempts(attempts)
    view["approvals"] = [
        {"id": a["id"], "step": a["step"], "action": a["action"], "status": a["status"], "decided_by": a["decided_by"]}
        for a in approvals.list(run_id=run_id)
    ]
    view["search"] = searches_in(attempts)
    view["trained"] = trained_in(attempts)
    view["sealed_test"] = sealed_in(attempts)
    return view


def sealed_in(attempts: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The sealed test's figures (the weights to register on rows no deciding step read), with the dev figures
    and the gap, from the sealed_test step's output; None where it did not score."""
    for a in reversed(attempts):
        output = a.get("output") if isinstance(a.get("output"), dict) else None
        if a["step"] == "sealed_test" and output and output.get("outcome") == "ok":
            sealed = SealedOutput.stored(output)
            return {
                "rows": sealed.n_test,
                "sizing": sealed.sizing,
                "test": output.get("metrics") or {},
                "dev": sealed.dev,
                "gap": sealed.gap,
                "pairwise": (sealed.pairwise or {}).get("note"),
            }
    return None


def trained_in(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What each attempt of a training step gave the trainer, stage by stage, in order: the resolved config
    (``trainteam.contract.stage_config``, TRL's names) its output records (``details.configs``)."""
    out: list[dict[str, Any]] = []
    for a in attempts:
        output = found if isinstance(found := a.get("output"), dict) else {}
        for stage, config in TrainOutput.stored(output).configs.items():
            entry = {"step": a["step"], "visit": a["visit"], "stage": stage, "config": config}
            if entry not in out:  # a paused persona run and its continuation: one
                out.append(entry)
    return out


SEARCH_FIELDS = (
    "stage",
    "method",
    "objective",
    "prior",
    "space",
    "widened",
    "run_steps",
    "warmup_steps",
    "rungs",
    "comparisons",
    "best_trial",
    "chosen",
    "choice_reason",
    "decided_by",
    "continued_from",
    "validation_rows",
    "budget_s",
    "spent_s",
)


def search_public(report: dict[str, Any]) -> dict[str, Any]:
    """A stage's recipe search (a ``SearchReport`` as the run store keeps it) as ``runs show --json`` and the
    console show it: the rates tried and why, every probe's held-out loss and gate metric at each rung it
    reached (``metric``: the gate's metric named by ``objective``, where measured), each rung's comparison (what
    ranked the probes, in which order, who went on) and the choice with its reason."""
    out = {k: report.get(k) for k in SEARCH_FIELDS}
    out["probes"] = [
        {
            "trial": p.get("trial"),
            "learning_rate": p.get("learning_rate"),
            "steps": p.get("steps"),
            "heldout_loss": p.get("values") or {},
            "metric": p.get("metric") or {},
            "pruned": bool(p.get("pruned")),
            "unstable": bool(p.get("unstable")),
            "widened": bool(p.get("widened")),
            "seconds": p.get("seconds"),
        }
        for p in report.get("probes") or []
    ]
    return out


def run_searches(runs, run_id: str) -> dict[str, dict[str, Any]]:
    """Stage -> its recipe search (``search_public``), from the run's finished steps (``searches_in``)."""
    return searches_in(runs.attempts(run_id))


def searches_in(attempts: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Stage -> its recipe search (``search_public``), from the finished steps' outputs (``details.search``);
    a later visit's (a retry reads the same search back) replaces an earlier one's."""
    out: dict[str, dict[str, Any]] = {}
    for a in attempts:
        output = found if isinstance(found := a.get("output"), dict) else {}
        for stage, report in TrainOutput.stored(output).search.items():
            out[stage] = search_public(report)
    return out


def runs_view(runs, limit: int = 50) -> list[dict[str, Any]]:
    out = []
    for row in runs.list(limit):
        view = _summary(row, runs)
        view["steps"] = runs.steps_summary(row["run_id"])
        out.append(view)
    return out


def _summary(row: dict[str, Any], runs) -> dict[str, Any]:
    view = {
        "run_id": row["run_id"],
        "workflow": row["workflow"],
        "task_name": row["task_name"],
        "status": row["status"],
        "current_step": row["current_step"],
        "error": row["error"],
        "metrics": row["metrics"],
        "created_at": row["created_at"],
        "updated_at": row["updated_at"],
        "executor_id": row["executor_id"],
    }
    # A run marked active whose process is gone is waiting for `runs resume` (or a worker): a
    # running one says so. (A run waiting for a person keeps saying that: the decision is kept
    # and reaches it when it resumes.)
    # Alive: the run's executor process still holds its lease (workflows/engine/executors.py), on any host.
    view["process_alive"] = runs.executor_alive(row["executor_id"]) if row["status"] in ACTIVE else None
    if view["process_alive"] is False and row["status"] == "running":
        view["status"] = "interrupted"
    return view
