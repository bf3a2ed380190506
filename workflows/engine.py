"""Durable execution of workflow specs on DBOS Transact.

One DBOS workflow per run (workflow id = run id). The spec and the task are the
workflow's input, so a resumed run walks the same graph even if the bundled spec
changed since. Each graph node runs as a named DBOS step (``train#1``); the next
node is chosen only from recorded step outputs, so replay is deterministic.
A person's approval arrives as a DBOS message (``recv``) and is checked against
the decision recorded in the workspace database.

Only long-running processes import this module (it imports dbos, ~1 s): the
foreground of ``execute-workflow``, ``runs resume`` and ``worker``.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from dbos import DBOS, SetWorkflowID
from rich.console import Console

from trainteam.graph import EdgeKind, NodeKind
from trainteam.workflows import approvals
from trainteam.workflows.executors import executor_alive, new_executor_id
from trainteam.workflows.spec import WorkflowSpec
from trainteam.workflows.store import RunStore
from trainteam.agents.task import TrainTask

APP_NAME = "trainteam"
WORKFLOW_NAME = "trainteam.run"

console = Console(stderr=True, soft_wrap=True)


class _Process:
    """What this process serves: one workspace, one executor id."""

    ws = None
    executor_id: str | None = None
    progress: bool = True
    launched: bool = False


def dbos_config(ws, executor_id: str) -> dict[str, Any]:
    return {
        "name": APP_NAME,
        "system_database_url": ws.dbos_database_url,
        "application_version": ws.settings.app_version,
        "executor_id": executor_id,
        "log_level": "WARNING",
        "notification_listener_polling_interval_sec": ws.settings.notification_polling_s,
    }


def launch(ws, progress: bool = True) -> str:
    if _Process.launched:
        raise RuntimeError("the workflow engine is already launched in this process")
    executor_id = new_executor_id()
    DBOS(config=dbos_config(ws, executor_id))
    _quiet_cancellations()
    _Process.ws, _Process.executor_id, _Process.progress = ws, executor_id, progress
    DBOS.launch()
    _Process.launched = True
    return executor_id


def _quiet_cancellations() -> None:
    """A person's `runs cancel` is not an error: keep DBOS from logging it with a traceback."""
    import logging

    from dbos._error import DBOSAwaitedWorkflowCancelledError, DBOSWorkflowCancelledError

    class _DropCancelled(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            exc = record.exc_info[1] if record.exc_info else None
            if isinstance(exc, (DBOSWorkflowCancelledError, DBOSAwaitedWorkflowCancelledError)):
                return False
            return "is no longer owned by this execution" not in record.getMessage()

    logger = logging.getLogger("dbos")
    if not any(isinstance(f, _DropCancelled) for f in logger.filters):
        logger.addFilter(_DropCancelled())


def shutdown() -> None:
    if _Process.launched:
        DBOS.destroy()
        _Process.launched = False
        _Process.ws = None


# --------------------------------------------------------------------------- steps
def _say(text: str) -> None:
    if _Process.progress:
        console.print(text)


def _mark_started(run_id: str, workflow: str, task_data: dict) -> None:
    ws = _Process.ws
    RunStore(ws.engine).set_status(run_id, "running", executor_id=_Process.executor_id)
    ws.graph.add_node(NodeKind.RUN, run_id, workflow=workflow, task=task_data.get("name"))


def _spent(run_id: str, cost_per_hour: float) -> dict[str, float]:
    seconds = sum(float(a["seconds"] or 0) for a in RunStore(_Process.ws.engine).attempts(run_id))
    return {"seconds": seconds, "cost_usd": seconds / 3600 * cost_per_hour}


def _execute_step(run_id: str, name: str, visit: int, spec_data: dict, task_data: dict,
                  outputs: dict[str, dict], inputs: dict[str, Any], decision: dict | None = None) -> dict[str, Any]:
    """One step, run by its persona's Agent. ``decision`` continues a persona run that
    stopped on a gated tool call, with the person's decision read from the queue."""
    from trainteam.agents import resume_persona_step, run_persona_step
    from trainteam.agents.tools import ToolContext

    ws = _Process.ws
    spec = WorkflowSpec.model_validate(spec_data)
    task = TrainTask.model_validate(task_data)
    step = spec.step(name)
    runs = RunStore(ws.engine)
    runs.set_status(run_id, "running", current_step=name)
    attempt = runs.start_attempt(run_id, name, visit, step.persona, _Process.executor_id)
    g = ws.graph
    g.link(NodeKind.STEP, f"{run_id}/{name}#{visit}", [(EdgeKind.PART_OF, f"Run:{run_id}")],
           run_id=run_id, step=name, visit=visit, persona=step.persona, tool=step.tool)
    t0 = time.monotonic()
    if not spec.applies(step, task.stages):
        out = {"outcome": "skipped", "summary": f"stage {'/'.join(step.stage)} not in the task", "artifacts": {},
               "metrics": {}, "nodes": {}, "details": {}}
        runs.finish_attempt(attempt, "skipped", 0.0, out)
        _say(f"  [dim]· {name}: skipped ({'/'.join(step.stage)} not in stages)[/dim]")
        return out
    if decision is None:
        _say(f"[bold]▶ {name}[/bold] [cyan]({step.persona})[/cyan]")
    ctx = ToolContext(ws=ws, run_id=run_id, step=name, visit=visit, persona=step.persona, task=task,
                      outputs=outputs, inputs={**step.inputs, **inputs}, progress=_Process.progress,
                      spent_s=_spent(run_id, 0.0)["seconds"])
    try:
        if decision is None:
            result = run_persona_step(ctx, step.tool)
        else:
            result = resume_persona_step(ctx, step.tool, decision["pending"], decision["status"] == "approved",
                                         decision.get("note"))
    except Exception as exc:  # the run fails with the reason; the traceback stays in the log
        seconds = time.monotonic() - t0
        message = f"{type(exc).__name__}: {exc}".splitlines()[0]
        runs.finish_attempt(attempt, "failed", seconds, None, message)
        from trainteam.errors import TrainteamError

        if not isinstance(exc, TrainteamError):  # a bug, not bad input: keep the traceback
            import logging

            logging.getLogger("trainteam").warning("step %s failed", name, exc_info=True)
        _say(f"[red]✗ {name} failed:[/red] {message}")
        return {"outcome": "error", "summary": message, "artifacts": {}, "metrics": {}, "nodes": {}, "details": {}}
    seconds = time.monotonic() - t0
    out = result.model_dump(mode="json")
    status = {"needs_approval": "needs_approval", "error": "failed"}.get(result.outcome, "completed")
    # The whole output (curves, evals, decisions) feeds the run report; a paused persona's
    # conversation stays in DBOS's record only.
    recorded = {**out, "details": {k: v for k, v in out["details"].items() if k != "pending"}}
    runs.finish_attempt(attempt, status, seconds, recorded, result.summary if status == "failed" else None)
    if result.outcome == "error":
        _say(f"[red]✗ {name} failed:[/red] {result.summary}")
        return out
    if result.outcome == "needs_approval":
        return out
    runs.merge_metrics(run_id, {f"{name}.{k}": v for k, v in result.metrics.items()})
    mark = {"passed": "[green]✓ passed[/green]", "failed": "[red]✗ failed[/red]",
            "stage_gate_failed": "[red]✗[/red]", "spike": "[yellow]⚠[/yellow]"}.get(result.outcome, "[green]✓[/green]")
    _say(f"  {mark} {name}: {result.summary} [dim]({seconds:.1f}s)[/dim]")
    return out


def _open_approval(run_id: str, name: str, visit: int, action: str, proposed: dict, evidence: dict,
                   requested_by: str) -> dict[str, Any]:
    ws = _Process.ws
    row = approvals.request(ws, run_id=run_id, step=name, visit=visit, action=action, proposed=proposed,
                            evidence=evidence, requested_by=requested_by)
    RunStore(ws.engine).set_status(run_id, "waiting_approval", current_step=name)
    _say(f"[yellow]⏸ {name}: waiting for a person to approve {action}[/yellow] — "
         f"`trainteam approvals approve {row['id']}` or `reject`")
    return {"id": row["id"], "status": row["status"]}


def _read_decision(approval_id: str) -> dict[str, Any]:
    return approvals.read_decision(_Process.ws, approval_id)


def _finish(run_id: str, status: str, error: str | None) -> dict[str, Any]:
    ws = _Process.ws
    RunStore(ws.engine).set_status(run_id, status, error=error, current_step=None)
    if status == "completed":
        _say(f"[bold green]run {run_id} completed[/bold green]")
    else:
        _say(f"[bold red]run {run_id} {status}:[/bold red] {error}")
    return {"run_id": run_id, "status": status, "error": error}


# ------------------------------------------------------------------ the workflow
def await_approval(run_id: str, name: str, visit: int, action: str, proposed: dict, evidence: dict,
                   requested_by: str, wait_s: float) -> dict[str, Any]:
    """Open an approval and wait durably for a person's decision.

    The decision in the database is authoritative; a message only wakes the run.
    If the decision was recorded while no process lived, the first read finds it.
    """
    opened = DBOS.run_step({"name": f"approval:{name}#{visit}:{action}"}, _open_approval, run_id, name, visit,
                           action, proposed, evidence, requested_by)
    approval_id = opened["id"]
    decision = DBOS.run_step({"name": f"decision:{approval_id}"}, _read_decision, approval_id)
    deadline_checks = 0
    while decision["status"] == "pending":
        msg = DBOS.recv(approvals.approval_topic(approval_id), timeout_seconds=wait_s)
        deadline_checks += 1
        decision = DBOS.run_step({"name": f"decision:{approval_id}:{deadline_checks}"}, _read_decision, approval_id)
        if msg is None and decision["status"] == "pending":
            return {**decision, "status": "expired"}
    DBOS.run_step({"name": f"resume:{approval_id}"}, RunStore(_Process.ws.engine).set_status, run_id, "running")
    return decision


@DBOS.workflow(name=WORKFLOW_NAME)
def run_workflow(run_id: str, spec_data: dict, task_data: dict) -> dict[str, Any]:
    spec = WorkflowSpec.model_validate(spec_data)
    task = TrainTask.model_validate(task_data)
    wait_s = _Process.ws.settings.approval_wait_s
    DBOS.run_step({"name": "start"}, _mark_started, run_id, spec.name, task_data)
    outputs: dict[str, dict] = {}
    visits: Counter[str] = Counter()
    loops: dict[str, int] = {}
    current: str | None = spec.start
    while current is not None:
        step = spec.step(current)
        visits[current] += 1
        visit = visits[current]
        inputs: dict[str, Any] = {}
        applicable = spec.applies(step, task.stages)
        if applicable:
            spent = DBOS.run_step({"name": f"budget:{current}#{visit}"}, _spent, run_id, task.budget.cost_per_hour_usd)
            over = spent["seconds"] > task.budget.max_wall_minutes * 60 or (
                task.budget.cost_per_hour_usd > 0 and spent["cost_usd"] > task.budget.max_cost_usd)
            if over:
                d = await_approval(run_id, current, visit, "exceed_budget",
                                   {"continue_with": current}, {"spent": spent, "budget": task.budget.model_dump()},
                                   "ml_orchestrator", wait_s)
                if d["status"] != "approved":
                    return DBOS.run_step({"name": "finish"}, _finish, run_id, "failed",
                                         f"budget exceeded before {current} ({spent['seconds']:.0f}s spent); "
                                         f"approval {d['status']}")
            if current in task.require_approval:
                d = await_approval(run_id, current, visit, "run_step",
                                   {"step": current, "tool": step.tool, "persona": step.persona},
                                   {"completed_steps": list(outputs)}, step.persona, wait_s)
                if d["status"] != "approved":
                    note = f": {d.get('note')}" if d.get("note") else ""
                    return DBOS.run_step({"name": "finish"}, _finish, run_id, "failed",
                                         f"step {current} was {d['status']} by {d.get('decided_by') or 'nobody'}{note}")
        out = DBOS.run_step({"name": f"{current}#{visit}"}, _execute_step, run_id, current, visit,
                            spec_data, task_data, dict(outputs), inputs)
        rounds = 0
        while out["outcome"] in ("spike", "stage_gate_failed", "needs_approval"):
            rounds += 1
            if out["outcome"] == "stage_gate_failed":  # an earlier curriculum stage's gate: only a person accepts
                details = out["details"]
                d = await_approval(run_id, current, visit, f"accept_failed_gate_{details['stage']}",
                                   {"gate": f"{current}.{details['stage']}", "stage": details["stage"]},
                                   {"summary": out["summary"], "reasons": details.get("reasons", [])},
                                   "eval_judge", wait_s)
                if d["status"] != "approved":
                    note = f": {d.get('note')}" if d.get("note") else ""
                    return DBOS.run_step({"name": "finish"}, _finish, run_id, "failed",
                                         f"{out['summary']}; acceptance {d['status']} by "
                                         f"{d.get('decided_by') or 'nobody'}{note}")
                inputs = {**inputs, "accepted_stage_gates": {**(inputs.get("accepted_stage_gates") or {}),
                                                             details["stage"]: d},
                          "before": {k: details.get(k) for k in ("losses", "events")}}
                out = DBOS.run_step({"name": f"{current}#{visit}.accepted{rounds}"}, _execute_step, run_id,
                                    current, visit, spec_data, task_data, dict(outputs), inputs)
                continue
            if out["outcome"] == "spike":  # a loss spike: a person decides on the restart proposal
                proposal = out["details"]["proposal"]
                evidence = {"summary": out["summary"], "monitor": out["details"].get("evidence") or {}}
                d = await_approval(run_id, current, visit, f"restart_after_spike_{rounds}", proposal,
                                   evidence, step.persona, wait_s)
                if d["status"] != "approved":
                    return DBOS.run_step({"name": "finish"}, _finish, run_id, "failed",
                                         f"{out['summary']}; restart {d['status']} by {d.get('decided_by')}")
                out = DBOS.run_step({"name": f"{current}#{visit}.restart{rounds}"}, _execute_step, run_id,
                                    current, visit, spec_data, task_data, dict(outputs),
                                    {"apply_proposal": proposal,  # curves and events carry over to the restart
                                     "before": {k: out["details"].get(k) for k in ("losses", "events")}})
                continue
            # a persona's gated tool call (pydantic-ai DeferredToolRequests): a person decides
            details = out["details"]
            d = await_approval(run_id, current, visit, details["action"], details["proposed"],
                               {"summary": out["summary"], "transcript": details.get("transcript")},
                               step.persona, wait_s)
            out = DBOS.run_step({"name": f"{current}#{visit}.decided{rounds}"}, _execute_step, run_id, current,
                                visit, spec_data, task_data, dict(outputs), inputs,
                                {"pending": details["pending"], "status": d["status"], "note": d.get("note")})
            if d["status"] != "approved":
                note = f": {d.get('note')}" if d.get("note") else ""
                return DBOS.run_step({"name": "finish"}, _finish, run_id, "failed",
                                     f"{details['action']} at {current} was {d['status']} by "
                                     f"{d.get('decided_by') or 'nobody'}{note}")
        if step.gate and out["outcome"] == "failed" and task.on_gate_failure == "ask":
            nxt_if_failed, _ = spec.next_step(current, "failed", loops if task.allow_retry else
                                              {f"{e.source}->{e.target}": 10**9 for e in spec.edges})
            if nxt_if_failed is None:  # no retry left: only a person can accept the failed gate
                d = await_approval(run_id, current, visit, "accept_failed_gate",
                                   {"gate": current, "stage": out["details"].get("stage")},
                                   {"reasons": out["details"].get("reasons", [])}, step.persona, wait_s)
                if d["status"] == "approved":
                    out = DBOS.run_step({"name": f"{current}#{visit}.accepted"}, _execute_step, run_id, current,
                                        visit, spec_data, task_data, dict(outputs), {"accepted": d})
        outputs[current] = out
        if out["outcome"] == "error":
            return DBOS.run_step({"name": "finish"}, _finish, run_id, "failed", f"step {current}: {out['summary']}")
        allowed_loops = loops if task.allow_retry else {f"{e.source}->{e.target}": 10**9 for e in spec.edges}
        nxt, loop_key = spec.next_step(current, out["outcome"], allowed_loops)
        if loop_key:
            loops[loop_key] = loops.get(loop_key, 0) + 1
        if nxt is None and step.gate and out["outcome"] == "failed":
            return DBOS.run_step({"name": "finish"}, _finish, run_id, "failed", out["summary"])
        current = nxt
    return DBOS.run_step({"name": "finish"}, _finish, run_id, "completed", None)


# ------------------------------------------------------------------- entry points
def start(ws, spec: WorkflowSpec, task: TrainTask, run_id: str):
    RunStore(ws.engine).create(run_id, spec.name, task.model_dump(mode="json"))
    with SetWorkflowID(run_id):
        return DBOS.start_workflow(run_workflow, run_id, spec.model_dump(mode="json", by_alias=True),
                                   task.model_dump(mode="json"))


def resume(ws, run_id: str, force: bool = False):
    """Continue a run whose process died. Finished steps are not run again."""
    from trainteam.errors import Conflict, NotFound

    status = DBOS.get_workflow_status(run_id)
    if status is None:
        raise NotFound(f"run {run_id!r} not found in the workflow engine")
    if status.status in ("SUCCESS", "ERROR"):
        return DBOS.retrieve_workflow(run_id)
    if status.status == "PENDING":
        alive = executor_alive(status.executor_id)
        if alive and status.executor_id != _Process.executor_id:
            raise Conflict(f"run {run_id} is being executed by live process {status.executor_id}")
        if alive is None and not force:
            raise Conflict(f"run {run_id} belongs to executor {status.executor_id} on another host; "
                           "resume there, or pass --force if that machine is gone")
    return DBOS.resume_workflow(run_id)


def recover_orphans(ws) -> list[str]:
    """Resume every pending run whose executor process on this host is gone (worker start)."""
    resumed = []
    for st in DBOS.list_workflows(status="PENDING", name=WORKFLOW_NAME, load_input=False, load_output=False):
        if st.executor_id != _Process.executor_id and executor_alive(st.executor_id) is False:
            DBOS.resume_workflow(st.workflow_id)
            resumed.append(st.workflow_id)
    return resumed
