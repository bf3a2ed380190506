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

import logging
import os
import traceback
from collections import Counter
from typing import Any

from dbos import DBOS, SetWorkflowID
from dbos._dbos import _get_dbos_instance
from dbos._utils import GlobalParams
from dbos._error import DBOSAwaitedWorkflowCancelledError, DBOSWorkflowCancelledError
from rich.console import Console
from rich.markup import escape

from trainteam.contract.redaction import redact_text, redacted_task
from trainteam.agents.runtime import resume_persona_step, run_persona_step
from trainteam.contract.step_io import NeedsPerson, Resume, StepInputs, StepResult, ToolContext
from trainteam.core import clock
from trainteam.core.errors import Conflict, NotFound, RunStopped, TrainteamError
from trainteam.graph.record import record_run, record_step
from trainteam.trainers.training import budget
from trainteam.trainers.training import console_lines
from trainteam.trainers.training.threads import cpu_sample, neighbours_since, threads_for
from trainteam.workflows.engine import approvals
from trainteam.workflows.report.evidence import with_spike_curve
from trainteam.workflows.engine.executors import APP_NAME, RUN_QUEUE, WORKFLOW_NAME, Lease, new_executor_id
from trainteam.workflows.engine.spec import WorkflowSpec
from trainteam.workflows.steps import STEPS
from trainteam.workflows.steps.train import over_budget
from trainteam.workflows.engine.store import RunStore
from trainteam.contract.train_task import TrainTask
from trainteam.workflows.report.views import short_id


# The name of a step's re-run after a person approved, by how it resumes (DBOS step names).
RERUN_NAMES = {"restart": "restart", "accept_stage_gate": "accepted", "keep_spiked": "kept",
               "extend_budget": "extended", "accept_gate": "accepted", "conversation": "decided",
               "accept_curation": "accepted"}
TRAINING_TOOLS = ("train", "align")

console = Console(stderr=True, soft_wrap=True)


class _Process:
    """What this process serves: one workspace, one executor id."""

    ws = None
    executor_id: str | None = None
    lease: Lease | None = None
    progress: bool = True
    prefix: bool = False  # a worker: each line of a run's output starts with its run id
    launched: bool = False
    logs: dict[str, Console] = {}  # run id -> its log file (logs/runs/<run_id>.log)
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


def launch(ws, progress: bool = True, worker: bool = False) -> str:
    """Launch DBOS in this process. Only a ``worker`` takes runs from the run queue; any launched
    process holds the lease on its executor id (``executors.Lease``) until it ends."""
    ws.check_dbos_database()  # a damaged dbos.sqlite is one line, before DBOS opens it
    if _Process.launched:
        raise RuntimeError("the workflow engine is already launched in this process")
    _Process.cpu_mark = cpu_sample()
    executor_id = new_executor_id()
    _Process.lease = Lease.hold(ws.engine, executor_id)  # before any run records this id
    DBOS(config=dbos_config(ws, executor_id))
    DBOS.listen_queues([RUN_QUEUE] if worker else [])
    _quiet_cancellations()
    _Process.ws, _Process.executor_id, _Process.progress, _Process.prefix = ws, executor_id, progress, worker
    DBOS.launch()
    _Process.launched = True
    return executor_id


def _quiet_cancellations() -> None:
    """A person's `runs cancel`, or a run that stopped with its reason (``RunStopped``, which
    the engine raises so DBOS records ERROR), is not a crash: keep DBOS from logging a traceback."""

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
    if _Process.lease is not None:
        _Process.lease.release()
        _Process.lease = None
    for log in _Process.logs.values():
        log.file.close()
    _Process.logs.clear()


# --------------------------------------------------------------------------- steps
def _say(text: str, run_id: str | None = None) -> None:
    """A line of the run's output: to its log file, and (with progress) to stderr, prefixed by
    the run id in a worker, where several runs' lines meet."""
    run_id = run_id or DBOS.workflow_id
    if run_id is not None and _Process.ws is not None:
        _run_log(run_id).print(text)
    if _Process.progress:
        console.print(f"{escape('[' + run_id + ']')} {text}" if _Process.prefix and run_id else text)


def _run_log(run_id: str) -> Console:
    log = _Process.logs.get(run_id)
    if log is None:
        folder = _Process.ws.dir("logs") / "runs"
        folder.mkdir(exist_ok=True)
        log = Console(file=open(folder / f"{run_id}.log", "a", encoding="utf-8"), soft_wrap=True,
                      color_system=None, force_terminal=False, width=200)
        _Process.logs[run_id] = log
    return log


def _mark_started(run_id: str, workflow: str, task_data: dict) -> None:
    ws = _Process.ws
    RunStore(ws.engine).set_status(run_id, "running", executor_id=_Process.executor_id)
    record_run(ws.graph, run_id, workflow=workflow, task=task_data.get("name"))


def _spent(run_id: str, cost_per_hour: float) -> dict[str, float]:
    seconds = sum(float(a["seconds"] or 0) for a in RunStore(_Process.ws.engine).attempts(run_id))
    return {"seconds": seconds, "cost_usd": seconds / 3600 * cost_per_hour}


def _execute_step(run_id: str, name: str, visit: int, spec_data: dict, task_data: dict,
                  outputs: dict[str, dict], decided: dict[str, Any], decision: dict | None = None,
                  allowed_s: float | None = None, execution: str = "") -> dict[str, Any]:
    """One step, run by its persona's Agent. ``decided``: the StepInputs people's decisions set
    for this visit. ``decision`` continues a persona run that stopped on a gated tool call, with
    the person's decision read from the queue. ``allowed_s``: what the run may spend in all; the
    step works under the rest as its ceiling."""
    ws = _Process.ws
    spec = WorkflowSpec.model_validate(spec_data)
    task = TrainTask.model_validate(task_data)
    step = spec.step(name)
    runs = RunStore(ws.engine)
    # the executor too: a run a worker recovered has a new owner
    runs.set_status(run_id, "running", current_step=name, executor_id=_Process.executor_id)
    attempt = runs.start_attempt(run_id, name, visit, step.persona, _Process.executor_id)
    record_step(ws.graph, run_id, name, visit, persona=step.persona, tool=step.tool)
    t0 = clock.now()
    if not spec.applies(step, task.stages):
        out = StepResult(outcome="skipped", summary=f"stage {'/'.join(step.stage)} not in the task").model_dump(mode="json")
        runs.finish_attempt(attempt, "skipped", 0.0, out)
        _say(f"  [dim]· {name}: skipped ({'/'.join(step.stage)} not in stages)[/dim]")
        return out
    if decision is None:
        _say(f"[bold]▶ {name}[/bold] [cyan]({step.persona})[/cyan]")
    spent_s = _spent(run_id, 0.0)["seconds"]
    allowed_s = task.budget.allowed_s() if allowed_s is None else allowed_s
    ctx = ToolContext(ws=ws, run_id=run_id, step=name, visit=visit, persona=step.persona, task=task,
                      outputs=outputs, inputs=dict(step.inputs), decided=StepInputs.model_validate(decided),
                      toolbox=STEPS, progress=_Process.progress, spent_s=spent_s, allowed_s=allowed_s,
                      execution=execution or f"{name}#{visit}")
    try:
        result = _run_persona(ctx, step.tool, decision)
    except Exception as exc:  # the run fails with the reason; the traceback stays in the log
        return _step_failed(runs, attempt, name, exc, clock.now() - t0)
    return _step_done(runs, attempt, run_id, name, result, clock.now() - t0)


def _run_persona(ctx: ToolContext, tool: str, decision: dict | None) -> StepResult:
    """The persona runs the step under the budget's ceiling; reaching it mid-way (an eval or a
    generation loop) is a question for a person, like a trainer that stopped at the ceiling."""
    try:
        with budget.ceiling(ctx.allowed_s - ctx.spent_s, ctx.allowed_s), \
                console_lines.lines_to(lambda text: _say(text, ctx.run_id)):  # the work's own lines (steps, probes)
            if decision is None:
                return run_persona_step(ctx, tool)
            return resume_persona_step(ctx, tool, decision["pending"], decision["status"] == "approved",
                                       decision.get("note"))
    except budget.BudgetExceeded as exc:
        where = {"where": exc.where, "overrun_s": round(exc.late_s, 2)}
        carried = ctx.decided.before
        return StepResult(outcome="over_budget", summary=str(exc), details={**where, **carried.model_dump()},
                          needs=over_budget(ctx, where, carried))


def _step_failed(runs: RunStore, attempt: int, name: str, exc: Exception, seconds: float) -> dict[str, Any]:
    # a library's message may echo a key: masked before it is stored, printed or checkpointed
    message = redact_text(f"{type(exc).__name__}: {exc}".splitlines()[0])
    runs.finish_attempt(attempt, "failed", seconds, None, message)
    if not isinstance(exc, TrainteamError):  # a bug, not bad input: keep the traceback (masked too)
        logging.getLogger("trainteam").warning("step %s failed\n%s", name, redact_text(traceback.format_exc()))
    _say(f"[red]✗ {name} failed:[/red] {escape(message)}")  # text, not markup: '[/x]' would raise
    return StepResult(outcome="error", summary=message).model_dump(mode="json")


def _step_done(runs: RunStore, attempt: int, run_id: str, name: str, result: StepResult,
               seconds: float) -> dict[str, Any]:
    out = result.model_dump(mode="json")
    if result.needs is not None:
        status = result.outcome
    else:
        status = {"needs_approval": "needs_approval", "error": "failed"}.get(result.outcome, "completed")
    # The whole output (curves, evals, decisions) feeds the run report; a paused persona's
    # conversation stays in DBOS's record only.
    recorded = out if result.needs is None or result.needs.resume.pending is None else {
        **out, "needs": {**out["needs"], "resume": {**out["needs"]["resume"], "pending": None}}}
    runs.finish_attempt(attempt, status, seconds, recorded, result.summary if status == "failed" else None)
    if result.outcome == "error":
        _say(f"[red]✗ {name} failed:[/red] {escape(result.summary)}")
        return out
    if result.needs is not None:
        return out
    runs.merge_metrics(run_id, {f"{name}.{k}": v for k, v in result.metrics.items()})
    mark = {"passed": "[green]✓ passed[/green]", "failed": "[red]✗ failed[/red]"}.get(result.outcome, "[green]✓[/green]")
    _say(f"  {mark} {name}: {escape(result.summary)} [dim]({seconds:.1f}s)[/dim]")
    return out


def _open_approval(run_id: str, name: str, visit: int, action: str, proposed: dict, evidence: dict,
                   requested_by: str) -> dict[str, Any]:
    ws = _Process.ws
    # The run waits before its approval is listed, so a person who finds the approval finds the run waiting.
    RunStore(ws.engine).set_status(run_id, "waiting_approval", current_step=name)
    row = approvals.request(ws, run_id=run_id, step=name, visit=visit, action=action, proposed=proposed,
                            evidence=evidence, requested_by=requested_by)
    _say(f"[yellow]⏸ {name}: waiting for a person to approve {action}[/yellow] — the evidence: "
         f"`trainteam approvals show {short_id(row['id'])}`, then `approve` or `reject` it")
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
    DBOS.run_step({"name": f"resume:{approval_id}"}, RunStore(_Process.ws.engine).set_status, run_id, "running",
                  executor_id=_Process.executor_id)
    return decision


def _ask(run_id: str, current: str, visit: int, needs: NeedsPerson, wait_s: float, rounds: int = 0,
         summary: str | None = None) -> dict[str, Any]:
    """The one way the engine asks a person: ``needs`` as an approval; returns the decision."""
    action = f"{needs.action}_{rounds}" if needs.numbered else needs.action
    evidence = needs.evidence if summary is None else {"summary": summary, **needs.evidence}
    if needs.resume.kind in ("restart", "keep_spiked") and needs.carried is not None:
        evidence = with_spike_curve(evidence, needs.proposed, needs.carried.losses)
    return await_approval(run_id, current, visit, action, needs.proposed, evidence, needs.requested_by, wait_s)


def _decided(d: dict) -> str:
    return f"{d['status']} by {d.get('decided_by') or 'nobody'}" + (f": {d['note']}" if d.get("note") else "")


def _ask_until_answered(run_id: str, current: str, visit: int, spec_data: dict, task_data: dict, out: dict,
                        outputs: dict, decided: StepInputs, allowed_s: float,
                        wait_s: float) -> tuple[dict, float, str | None]:
    """While the step needs a person, ask and re-run it as the decision says. Returns (its last
    output, the seconds of budget granted meanwhile, the run's error if a person said no)."""
    task = TrainTask.model_validate(task_data)
    granted, rounds, cut_at = 0.0, 0, []
    while out.get("needs"):
        rounds += 1
        needs = NeedsPerson.model_validate(out["needs"])
        extension = task.budget.extension_s()
        if needs.resume.kind == "extend_budget":
            extension = _extension(task, needs, cut_at)
            needs = needs.model_copy(update={"proposed": {**needs.proposed, "extra_minutes": round(extension / 60, 2)}})
        d = _ask(run_id, current, visit, needs, wait_s, rounds, summary=out["summary"])
        approved = d["status"] == "approved"
        decision = None
        if needs.resume.kind == "conversation":  # the persona's conversation goes on with the decision
            decision = {"pending": needs.resume.pending, "status": d["status"], "note": d.get("note")}
        elif not approved:
            return out, granted, f"{out['summary']}; {needs.refused} {_decided(d)}"
        else:
            granted += extension if needs.resume.kind == "extend_budget" else 0.0
            decided = decided.after(needs, d)
        execution = f"{current}#{visit}.{RERUN_NAMES[needs.resume.kind]}{rounds}"
        out = DBOS.run_step({"name": execution}, _execute_step, run_id, current, visit, spec_data, task_data,
                            dict(outputs), decided.model_dump(mode="json"), decision, allowed_s + granted, execution)
        if decision is not None and not approved:
            return out, granted, f"{needs.action} at {current} was {_decided(d)}"
    return out, granted, None


def _extension(task: TrainTask, needs: NeedsPerson, cut_at: list[str]) -> float:
    """Seconds to ask for at a budget ceiling: the task's extension; doubled each time the same step is cut
    again at the same evaluation or generation, which starts over from its first row (training resumes
    from its checkpoint and keeps its steps), so a run approved with ``--yes`` cannot ask forever."""
    where = str(needs.evidence.get("where", ""))
    again = 0 if where.startswith("training") else cut_at.count(where)
    cut_at.append(where)
    return task.budget.extension_s() * 2 ** again


def _stop(run_id: str, status: str, error: str) -> None:
    """End the run as ``status``: recorded in the workspace, then raised so DBOS records ERROR."""
    result = DBOS.run_step({"name": "finish"}, _finish, run_id, status, error)
    raise RunStopped(result)


def _before_step(run_id: str, current: str, visit: int, step, task: TrainTask, outputs: dict, allowed_s: float,
                 wait_s: float) -> tuple[float, str | None]:
    """The checks before a step starts: the budget, and a person's go-ahead where the task asks
    for one. Returns (seconds of budget granted, the run's error if it must stop)."""
    granted = 0.0
    spent = DBOS.run_step({"name": f"budget:{current}#{visit}"}, _spent, run_id, task.budget.cost_per_hour_usd)
    if spent["seconds"] > allowed_s:
        needs = NeedsPerson(action="exceed_budget", requested_by="ml_orchestrator", resume=Resume(kind="extend_budget"),
                            proposed={"continue_with": current, "extra_minutes": round(task.budget.extension_s() / 60, 2)},
                            evidence={"spent": spent, "allowed_minutes": round(allowed_s / 60, 2),
                                      "budget": task.budget.model_dump()})
        d = _ask(run_id, current, visit, needs, wait_s)
        if d["status"] != "approved":
            return 0.0, (f"budget exceeded before {current} ({spent['seconds']:.0f}s spent); "
                         f"approval {d['status']}")
        granted = task.budget.extension_s()
    if current in task.require_approval:
        needs = NeedsPerson(action="run_step", proposed={"step": current, "tool": step.tool, "persona": step.persona},
                            evidence={"completed_steps": list(outputs)}, requested_by=step.persona,
                            resume=Resume(kind="go_ahead"))
        d = _ask(run_id, current, visit, needs, wait_s)
        if d["status"] != "approved":
            note = f": {d.get('note')}" if d.get("note") else ""
            return granted, f"step {current} was {d['status']} by {d.get('decided_by') or 'nobody'}{note}"
    return granted, None


def _accept_failed_gate(run_id: str, current: str, visit: int, step, spec: WorkflowSpec, spec_data: dict,
                        task_data: dict, out: dict, outputs: dict, loops: dict, allowed_s: float, wait_s: float) -> dict:
    """``on_gate_failure: ask`` and no retry left, or the judge's plan says a retry cannot help: a
    person may accept the failed gate, seeing the judge's diagnosis and plan in the evidence."""
    task = TrainTask.model_validate(task_data)
    nxt_if_failed, _ = spec.next_step(current, "failed", _allowed_loops(spec, task, loops))
    diagnosis = dict(out["details"].get("diagnosis") or {})
    plan = diagnosis.pop("plan", None)
    if nxt_if_failed is not None and (plan or {}).get("action") not in ("stop", "more_data"):
        return out
    evidence = {"reasons": out["details"].get("reasons", []), **({"diagnosis": diagnosis, "plan": plan} if plan else {})}
    needs = NeedsPerson(action="accept_failed_gate", proposed={"gate": current, "stage": out["details"].get("stage")},
                        evidence=evidence, requested_by=step.persona, resume=Resume(kind="accept_gate"))
    d = _ask(run_id, current, visit, needs, wait_s)
    if d["status"] != "approved":
        return out
    decided = StepInputs().after(needs, d)
    return DBOS.run_step({"name": f"{current}#{visit}.accepted"}, _execute_step, run_id, current, visit,
                         spec_data, task_data, dict(outputs), decided.model_dump(mode="json"), None, allowed_s,
                         f"{current}#{visit}.accepted")


def _allowed_loops(spec: WorkflowSpec, task: TrainTask, loops: dict[str, int]) -> dict[str, int]:
    """How often each retry edge was taken; without ``allow_retry`` every edge counts as used up."""
    return loops if task.allow_retry else {f"{e.source}->{e.target}": 10**9 for e in spec.edges}


def _fix_threads(run_id: str, task_data: dict) -> int:
    """The torch thread count of the whole run: the task's, TRAINTEAM_THREADS, or the cores the
    neighbours left free since this process started (its own CPU time subtracted)."""
    n = task_data.get("threads") or int(os.environ.get("TRAINTEAM_THREADS") or 0)
    if not n:
        cores = os.cpu_count() or 1
        n = threads_for(neighbours_since(_Process.cpu_mark or cpu_sample(), 0.5), cores, current=cores)
    RunStore(_Process.ws.engine).merge_metrics(run_id, {"run.threads": n})
    return n


def _visit(run_id: str, current: str, visit: int, spec: WorkflowSpec, spec_data: dict, task_data: dict,
           outputs: dict, loops: dict, allowed_s: float, wait_s: float) -> tuple[dict | None, float, str | None]:
    """One visit of a step: the checks before it, the step, a person's answers to what it asked,
    and (a failed gate with ``on_gate_failure: ask``) a person's acceptance.
    Returns (its output, the seconds of budget granted, the run's error if it must stop)."""
    step = spec.step(current)
    task = TrainTask.model_validate(task_data)
    granted = 0.0
    if spec.applies(step, task.stages):
        granted, error = _before_step(run_id, current, visit, step, task, outputs, allowed_s, wait_s)
        if error:
            return None, granted, error
    out = DBOS.run_step({"name": f"{current}#{visit}"}, _execute_step, run_id, current, visit,
                        spec_data, task_data, dict(outputs), StepInputs().model_dump(mode="json"), None,
                        allowed_s + granted)
    out, more, error = _ask_until_answered(run_id, current, visit, spec_data, task_data, out, outputs,
                                           StepInputs(), allowed_s + granted, wait_s)
    granted += more
    if error:
        return out, granted, error
    if step.gate and out["outcome"] == "failed" and task.on_gate_failure == "ask":
        out = _accept_failed_gate(run_id, current, visit, step, spec, spec_data, task_data, out, outputs,
                                  loops, allowed_s + granted, wait_s)
    if out["outcome"] == "error":
        return out, granted, f"step {current}: {out['summary']}"
    return out, granted, None


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
        if spec.applies(step, task.stages) and step.tool in TRAINING_TOOLS and not fixed:
            # Weights depend on the thread count: chosen once as training starts, recorded by DBOS
            # (a resumed run keeps it) and in the task every later step sees (a replay keeps it).
            task_data = {**task_data, "threads": DBOS.run_step({"name": "threads"}, _fix_threads, run_id, task_data)}
            fixed = True
        out, granted, error = _visit(run_id, current, visits[current], spec, spec_data, task_data, outputs, loops,
                                     allowed_s, wait_s)
        allowed_s += granted
        nxt, loop_key = (None, None) if error else spec.next_step(current, out["outcome"],
                                                                  _allowed_loops(spec, task, loops))
        if error is None and nxt is None and step.gate and out["outcome"] == "failed":
            error = out["summary"]
        if error:  # the one way a run fails
            _stop(run_id, "failed", error)
        outputs[current] = out
        if loop_key:
            loops[loop_key] = loops.get(loop_key, 0) + 1
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
    status = DBOS.get_workflow_status(run_id)
    if status is None:
        raise NotFound(f"run {run_id!r} not found in the workflow engine")
    if status.status in ("SUCCESS", "ERROR", "CANCELLED"):
        return DBOS.retrieve_workflow(run_id)
    if status.status == "ENQUEUED":
        raise Conflict(f"run {run_id} is queued: a `trainteam worker` will run it")
    if status.status == "PENDING" and status.executor_id != _Process.executor_id and not force \
            and RunStore(ws.engine).executor_alive(status.executor_id):
        raise Conflict(f"run {run_id} is being executed by live process {status.executor_id}")
    return DBOS.resume_workflow(run_id)


def register_queue(worker_concurrency: int | None, global_concurrency: int | None, poll_s: float):
    """The run queue, its limits stored in the system database (the last worker started sets them)."""
    return DBOS.register_queue(RUN_QUEUE, worker_concurrency=worker_concurrency,
                               global_concurrency=global_concurrency, polling_interval_sec=poll_s,
                               on_conflict="always_update")


def recover_dead(ws) -> list[str]:
    """Hand the pending runs of every executor whose lease is free (its process died, on any host)
    back to the run queue, where DBOS gives each to one live worker (its atomic ENQUEUED ->
    PENDING claim). What ``DBOS._recover_pending_workflows`` does, with the run queue (and its
    limits) instead of DBOS's internal queue, which every launched process takes from."""
    runs, sys_db = RunStore(ws.engine), _get_dbos_instance()._sys_db
    pending = DBOS.list_workflows(status="PENDING", name=WORKFLOW_NAME, load_input=False, load_output=False)
    dead = {st.executor_id for st in pending if st.executor_id != _Process.executor_id
            and not runs.executor_alive(st.executor_id)}
    recovered = []
    for executor_id in sorted(dead):
        for wf in sys_db.get_pending_workflows(executor_id, GlobalParams.app_version):
            if sys_db.reenqueue_for_recovery(wf.workflow_id, [executor_id], RUN_QUEUE):
                recovered.append(wf.workflow_id)
    return recovered


def queue_busy() -> bool:
    """Runs waiting on the run queue, or running in this process."""
    queued = DBOS.list_workflows(status="ENQUEUED", queue_name=RUN_QUEUE, load_input=False, load_output=False)
    mine = DBOS.list_workflows(status="PENDING", executor_id=_Process.executor_id, load_input=False,
                               load_output=False)
    return bool(queued or mine)
