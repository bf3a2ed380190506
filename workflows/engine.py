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
from rich.markup import escape

from trainteam.agents.redact import redact_text, redacted_task
from trainteam.graph import EdgeKind, NodeKind
from trainteam.workflows import approvals
from trainteam.workflows.executors import executor_alive, new_executor_id
from trainteam.workflows.spec import WorkflowSpec
from trainteam.workflows.store import RunStore
from trainteam.workflows.task import TrainTask

APP_NAME = "trainteam"
WORKFLOW_NAME = "trainteam.run"

# Outcomes a step ends with when only a person can say how to go on.
ASK_OUTCOMES = ("spike", "spike_limit", "stage_gate_failed", "over_budget", "needs_approval")
# What a re-run of the step after a person's decision carries over from the attempt before.
CARRIED = ("losses", "events", "spikes")

console = Console(stderr=True, soft_wrap=True)


class _Process:
    """What this process serves: one workspace, one executor id."""

    ws = None
    executor_id: str | None = None
    progress: bool = True
    launched: bool = False
    cpu_mark: tuple[float, float, float] | None = None  # CPU counters at launch: the neighbours' load since


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
    ws.check_dbos_database()  # a damaged dbos.sqlite is one line, before DBOS opens it
    if _Process.launched:
        raise RuntimeError("the workflow engine is already launched in this process")
    from trainteam.trainers.threads import cpu_sample

    _Process.cpu_mark = cpu_sample()
    executor_id = new_executor_id()
    DBOS(config=dbos_config(ws, executor_id))
    _quiet_cancellations()
    _Process.ws, _Process.executor_id, _Process.progress = ws, executor_id, progress
    DBOS.launch()
    _Process.launched = True
    return executor_id


def _quiet_cancellations() -> None:
    """A person's `runs cancel`, or a run that stopped with its reason (``RunStopped``, which
    the engine raises so DBOS records ERROR), is not a crash: keep DBOS from logging a traceback."""
    import logging

    from dbos._error import DBOSAwaitedWorkflowCancelledError, DBOSWorkflowCancelledError

    from trainteam.core.errors import RunStopped

    class _DropCancelled(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            exc = record.exc_info[1] if record.exc_info else None
            if isinstance(exc, (DBOSWorkflowCancelledError, DBOSAwaitedWorkflowCancelledError, RunStopped)):
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
                  outputs: dict[str, dict], inputs: dict[str, Any], decision: dict | None = None,
                  allowed_s: float | None = None) -> dict[str, Any]:
    """One step, run by its persona's Agent. ``decision`` continues a persona run that
    stopped on a gated tool call, with the person's decision read from the queue.
    ``allowed_s``: what the run may spend in all; the step works under the rest as its ceiling."""
    from trainteam.agents import resume_persona_step, run_persona_step
    from trainteam.workflows.steps import ToolContext
    from trainteam.trainers import budget

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
    spent_s = _spent(run_id, 0.0)["seconds"]
    allowed_s = task.budget.allowed_s() if allowed_s is None else allowed_s
    ctx = ToolContext(ws=ws, run_id=run_id, step=name, visit=visit, persona=step.persona, task=task,
                      outputs=outputs, inputs={**step.inputs, **inputs}, progress=_Process.progress,
                      spent_s=spent_s, allowed_s=allowed_s)
    try:
        with budget.ceiling(allowed_s - spent_s, allowed_s):
            if decision is None:
                result = run_persona_step(ctx, step.tool)
            else:
                result = resume_persona_step(ctx, step.tool, decision["pending"], decision["status"] == "approved",
                                             decision.get("note"))
    except budget.BudgetExceeded as exc:  # an eval or generation loop reached the ceiling: a person decides
        seconds = time.monotonic() - t0
        out = {"outcome": "over_budget", "summary": str(exc), "artifacts": {}, "metrics": {}, "nodes": {},
               "details": {"where": exc.where, "overrun_s": round(exc.late_s, 2), **(inputs.get("before") or {})}}
        runs.finish_attempt(attempt, "over_budget", seconds, out)
        return out
    except Exception as exc:  # the run fails with the reason; the traceback stays in the log
        seconds = time.monotonic() - t0
        # a library's message may echo a key: masked before it is stored, printed or checkpointed
        message = redact_text(f"{type(exc).__name__}: {exc}".splitlines()[0])
        runs.finish_attempt(attempt, "failed", seconds, None, message)
        from trainteam.core.errors import TrainteamError

        if not isinstance(exc, TrainteamError):  # a bug, not bad input: keep the traceback (masked too)
            import logging
            import traceback

            logging.getLogger("trainteam").warning("step %s failed\n%s", name, redact_text(traceback.format_exc()))
        _say(f"[red]✗ {name} failed:[/red] {escape(message)}")  # text, not markup: '[/x]' would raise
        return {"outcome": "error", "summary": message, "artifacts": {}, "metrics": {}, "nodes": {}, "details": {}}
    seconds = time.monotonic() - t0
    out = result.model_dump(mode="json")
    status = {"needs_approval": "needs_approval", "error": "failed"}.get(result.outcome, "completed")
    if result.outcome in ASK_OUTCOMES:
        status = result.outcome
    # The whole output (curves, evals, decisions) feeds the run report; a paused persona's
    # conversation stays in DBOS's record only.
    recorded = {**out, "details": {k: v for k, v in out["details"].items() if k != "pending"}}
    runs.finish_attempt(attempt, status, seconds, recorded, result.summary if status == "failed" else None)
    if result.outcome == "error":
        _say(f"[red]✗ {name} failed:[/red] {escape(result.summary)}")
        return out
    if result.outcome in ASK_OUTCOMES:
        return out
    runs.merge_metrics(run_id, {f"{name}.{k}": v for k, v in result.metrics.items()})
    mark = {"passed": "[green]✓ passed[/green]", "failed": "[red]✗ failed[/red]"}.get(result.outcome, "[green]✓[/green]")
    _say(f"  {mark} {name}: {escape(result.summary)} [dim]({seconds:.1f}s)[/dim]")
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
    error = None if error is None else redact_text(error)  # it becomes DBOS's output and RunStopped's result
    RunStore(ws.engine).set_status(run_id, status, error=error, current_step=None)
    if status == "completed":
        _say(f"[bold green]run {run_id} completed[/bold green]")
    else:
        _say(f"[bold red]run {run_id} {status}:[/bold red] {escape(str(error))}")
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


def _carry(out: dict) -> dict[str, Any]:
    return {"before": {k: out["details"].get(k) for k in CARRIED if out["details"].get(k) is not None}}


def _question(step, out: dict, rounds: int, allowed_s: float, task: TrainTask) -> tuple[str, dict, dict, str]:
    """The approval an outcome asks for: (action, proposed, evidence, requested_by)."""
    o, details, summary = out["outcome"], out["details"], out["summary"]
    if o == "stage_gate_failed":  # an earlier curriculum stage's gate: only a person accepts
        return (f"accept_failed_gate_{details['stage']}", {"gate": f"{step.name}.{details['stage']}",
                "stage": details["stage"]}, {"summary": summary, "reasons": details.get("reasons", [])}, "eval_judge")
    if o == "spike":  # the monitor caught a spike: a person decides on the restart proposal
        return (f"restart_after_spike_{rounds}", details["proposal"],
                {"summary": summary, "monitor": details.get("evidence") or {}, "spikes": details.get("spikes", [])},
                step.persona)
    if o == "spike_limit":  # no restart worth proposing: a person may keep the weights from before the spike
        return (f"accept_spiked_{details['stage']}", details["accept"],
                {"summary": summary, "monitor": details.get("evidence") or {}, "spikes": details.get("spikes", [])},
                step.persona)
    if o == "over_budget":
        extra = task.budget.extension_s()
        # numbered: an approval's id is its action within the step visit, and one visit may ask often
        return (f"exceed_budget_{rounds}", {"continue_with": step.name, "extra_minutes": round(extra / 60, 2)},
                {"summary": summary, "where": details.get("where"), "checkpoint": details.get("checkpoint"),
                 "step": details.get("step"), "overrun_s": details.get("overrun_s"),
                 "allowed_minutes": round(allowed_s / 60, 2), "budget": task.budget.model_dump()}, "ml_orchestrator")
    # a persona's gated tool call (pydantic-ai DeferredToolRequests)
    return (details["action"], details["proposed"], {"summary": summary, "transcript": details.get("transcript")},
            step.persona)


def _decided(d: dict) -> str:
    return f"{d['status']} by {d.get('decided_by') or 'nobody'}" + (f": {d['note']}" if d.get("note") else "")


def _refused(out: dict, d: dict) -> str:
    """The run's error when a person did not approve what ``out`` asked for."""
    what = {"stage_gate_failed": "acceptance", "spike": "restart", "spike_limit": "acceptance",
            "over_budget": "more budget"}[out["outcome"]]
    return f"{out['summary']}; {what} {_decided(d)}"


def _after_yes(out: dict, d: dict, inputs: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The re-run's inputs once a person approved, and the name of that re-run."""
    o, details = out["outcome"], out["details"]
    if o == "stage_gate_failed":
        gates = {**(inputs.get("accepted_stage_gates") or {}), details["stage"]: d}
        return {**inputs, "accepted_stage_gates": gates, **_carry(out)}, "accepted"
    if o == "spike":
        return {**inputs, "apply_proposal": details["proposal"], **_carry(out)}, "restart"
    if o == "spike_limit":
        kept = {**(inputs.get("accept_spiked") or {}), details["stage"]: {**details["accept"], "approval": d}}
        return {**inputs, "accept_spiked": kept, **_carry(out)}, "kept"
    # over_budget: the same work, resumed from its checkpoint, under the person's extension
    return {**inputs, "budget_extended": True, **_carry(out)}, "extended"


def _ask_until_answered(run_id: str, current: str, visit: int, spec_data: dict, task_data: dict, out: dict,
                        outputs: dict, inputs: dict, allowed_s: float, wait_s: float) -> tuple[dict, float, str | None]:
    """While the step asks a person, ask and re-run it. Returns (its last output, the seconds
    of budget granted meanwhile, the run's error if a person said no)."""
    spec = WorkflowSpec.model_validate(spec_data)
    task = TrainTask.model_validate(task_data)
    step = spec.step(current)
    granted, rounds = 0.0, 0
    while out["outcome"] in ASK_OUTCOMES:
        rounds += 1
        action, proposed, evidence, by = _question(step, out, rounds, allowed_s + granted, task)
        d = await_approval(run_id, current, visit, action, proposed, evidence, by, wait_s)
        if out["outcome"] == "needs_approval":  # the persona's conversation goes on with the decision
            decision = {"pending": out["details"]["pending"], "status": d["status"], "note": d.get("note")}
            out = DBOS.run_step({"name": f"{current}#{visit}.decided{rounds}"}, _execute_step, run_id, current,
                                visit, spec_data, task_data, dict(outputs), inputs, decision, allowed_s + granted)
            if d["status"] != "approved":
                return out, granted, f"{action} at {current} was {_decided(d)}"
            continue
        if d["status"] != "approved":
            return out, granted, _refused(out, d)
        if out["outcome"] == "over_budget":
            granted += task.budget.extension_s()
        inputs, kind = _after_yes(out, d, inputs)
        out = DBOS.run_step({"name": f"{current}#{visit}.{kind}{rounds}"}, _execute_step, run_id, current, visit,
                            spec_data, task_data, dict(outputs), inputs, None, allowed_s + granted)
    return out, granted, None


def _stop(run_id: str, status: str, error: str) -> None:
    """End the run as ``status``: recorded in the workspace, then raised so DBOS records ERROR."""
    from trainteam.core.errors import RunStopped

    result = DBOS.run_step({"name": "finish"}, _finish, run_id, status, error)
    raise RunStopped(result)


def _before_step(run_id: str, current: str, visit: int, step, task: TrainTask, outputs: dict, allowed_s: float,
                 wait_s: float) -> tuple[float, str | None]:
    """The checks before a step starts: the budget, and a person's go-ahead where the task asks
    for one. Returns (seconds of budget granted, the run's error if it must stop)."""
    granted = 0.0
    spent = DBOS.run_step({"name": f"budget:{current}#{visit}"}, _spent, run_id, task.budget.cost_per_hour_usd)
    if spent["seconds"] > allowed_s:
        d = await_approval(run_id, current, visit, "exceed_budget",
                           {"continue_with": current, "extra_minutes": round(task.budget.extension_s() / 60, 2)},
                           {"spent": spent, "allowed_minutes": round(allowed_s / 60, 2),
                            "budget": task.budget.model_dump()}, "ml_orchestrator", wait_s)
        if d["status"] != "approved":
            return 0.0, (f"budget exceeded before {current} ({spent['seconds']:.0f}s spent); "
                         f"approval {d['status']}")
        granted = task.budget.extension_s()
    if current in task.require_approval:
        d = await_approval(run_id, current, visit, "run_step",
                           {"step": current, "tool": step.tool, "persona": step.persona},
                           {"completed_steps": list(outputs)}, step.persona, wait_s)
        if d["status"] != "approved":
            note = f": {d.get('note')}" if d.get("note") else ""
            return granted, f"step {current} was {d['status']} by {d.get('decided_by') or 'nobody'}{note}"
    return granted, None


def _accept_failed_gate(run_id: str, current: str, visit: int, step, spec: WorkflowSpec, spec_data: dict,
                        task_data: dict, out: dict, outputs: dict, loops: dict, allowed_s: float, wait_s: float) -> dict:
    """``on_gate_failure: ask`` and no retry left: a person may accept the failed gate."""
    task = TrainTask.model_validate(task_data)
    nxt_if_failed, _ = spec.next_step(current, "failed", loops if task.allow_retry else
                                      {f"{e.source}->{e.target}": 10**9 for e in spec.edges})
    if nxt_if_failed is not None:
        return out
    d = await_approval(run_id, current, visit, "accept_failed_gate",
                       {"gate": current, "stage": out["details"].get("stage")},
                       {"reasons": out["details"].get("reasons", [])}, step.persona, wait_s)
    if d["status"] != "approved":
        return out
    return DBOS.run_step({"name": f"{current}#{visit}.accepted"}, _execute_step, run_id, current, visit,
                         spec_data, task_data, dict(outputs), {"accepted": d}, None, allowed_s)


TRAINING_TOOLS = ("train", "align")


def _fix_threads(run_id: str, task_data: dict) -> int:
    """The torch thread count of the whole run: the task's, TRAINTEAM_THREADS, or the cores the
    neighbours left free since this process started (its own CPU time subtracted)."""
    import os

    from trainteam.trainers.threads import cpu_sample, neighbours_since, threads_for

    n = task_data.get("threads") or int(os.environ.get("TRAINTEAM_THREADS") or 0)
    if not n:
        cores = os.cpu_count() or 1
        n = threads_for(neighbours_since(_Process.cpu_mark or cpu_sample(), 0.5), cores, current=cores)
    RunStore(_Process.ws.engine).merge_metrics(run_id, {"run.threads": n})
    return n


@DBOS.workflow(name=WORKFLOW_NAME)
def run_workflow(run_id: str, spec_data: dict, task_data: dict) -> dict[str, Any]:
    spec = WorkflowSpec.model_validate(spec_data)
    wait_s = _Process.ws.settings.approval_wait_s
    DBOS.run_step({"name": "start"}, _mark_started, run_id, spec.name, task_data)
    task = TrainTask.model_validate(task_data)
    fixed = False
    allowed_s = task.budget.allowed_s()
    outputs: dict[str, dict] = {}
    visits: Counter[str] = Counter()
    loops: dict[str, int] = {}
    current: str | None = spec.start
    while current is not None:
        step = spec.step(current)
        visits[current] += 1
        visit = visits[current]
        if spec.applies(step, task.stages):
            if step.tool in TRAINING_TOOLS and not fixed:
                # Weights depend on the thread count: chosen once as training starts, recorded by DBOS
                # (a resumed run keeps it) and in the task every later step sees (a replay keeps it).
                task_data = {**task_data, "threads": DBOS.run_step({"name": "threads"}, _fix_threads, run_id,
                                                                   task_data)}
                fixed = True
            granted, error = _before_step(run_id, current, visit, step, task, outputs, allowed_s, wait_s)
            allowed_s += granted
            if error:
                _stop(run_id, "failed", error)
        out = DBOS.run_step({"name": f"{current}#{visit}"}, _execute_step, run_id, current, visit,
                            spec_data, task_data, dict(outputs), {}, None, allowed_s)
        out, granted, error = _ask_until_answered(run_id, current, visit, spec_data, task_data, out, outputs, {},
                                                  allowed_s, wait_s)
        allowed_s += granted
        if error:
            _stop(run_id, "failed", error)
        if step.gate and out["outcome"] == "failed" and task.on_gate_failure == "ask":
            out = _accept_failed_gate(run_id, current, visit, step, spec, spec_data, task_data, out, outputs,
                                      loops, allowed_s, wait_s)
        outputs[current] = out
        if out["outcome"] == "error":
            _stop(run_id, "failed", f"step {current}: {out['summary']}")
        allowed_loops = loops if task.allow_retry else {f"{e.source}->{e.target}": 10**9 for e in spec.edges}
        nxt, loop_key = spec.next_step(current, out["outcome"], allowed_loops)
        if loop_key:
            loops[loop_key] = loops.get(loop_key, 0) + 1
        if nxt is None and step.gate and out["outcome"] == "failed":
            _stop(run_id, "failed", out["summary"])
        current = nxt
    return DBOS.run_step({"name": "finish"}, _finish, run_id, "completed", None)


# ------------------------------------------------------------------- entry points
def start(ws, spec: WorkflowSpec, task: TrainTask, run_id: str):
    # The task as stored and as the workflow's input, which the run itself reads: a key pasted into its
    # description is masked in both; one in a field the run uses is refused before anything is written.
    task_data = redacted_task(task.model_dump(mode="json"))
    RunStore(ws.engine).create(run_id, spec.name, task_data)
    with SetWorkflowID(run_id):
        return DBOS.start_workflow(run_workflow, run_id, spec.model_dump(mode="json", by_alias=True), task_data)


def resume(ws, run_id: str, force: bool = False):
    """Continue a run whose process died. Finished steps are not run again."""
    from trainteam.core.errors import Conflict, NotFound

    status = DBOS.get_workflow_status(run_id)
    if status is None:
        raise NotFound(f"run {run_id!r} not found in the workflow engine")
    if status.status in ("SUCCESS", "ERROR", "CANCELLED"):
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
