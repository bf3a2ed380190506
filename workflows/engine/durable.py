"""Durable execution of workflow specs on DBOS Transact.

One DBOS workflow per run (workflow id = run id). The spec and the task are the
workflow's input, so a resumed run walks the same graph even if the bundled spec
changed since. Each graph node runs as a named DBOS step (``train#1``); the next
node is chosen only from recorded step outputs, so replay is deterministic.
A person's approval arrives as a DBOS message (``recv``) and is checked against
the decision recorded in the workspace database.

The process's side is an ``Engine``: launched once per process (``Engine.launch``), it owns the
workspace, the executor id and its lease, the run logs and the CPU mark the thread rule measures
from. DBOS registers module-level functions, so ``run_workflow`` stays a thin door to the engine
launched here (``Engine.running()``); the steps it checkpoints are the engine's methods. DBOS's public API
only (a dead executor's run goes back to the queue through ``Engine._hand_back``, which says how).

Only long-running processes import this module (it imports dbos, ~1 s): the
foreground of ``execute-workflow``, ``runs resume`` and ``worker``.
"""

from __future__ import annotations

import logging
import traceback
from collections import Counter
from collections.abc import Mapping
from typing import Any, ClassVar, NoReturn

from dbos import DBOS, Queue, SetWorkflowID, WorkflowHandle
from dbos import error as dbos_error
from rich.console import Console
from rich.markup import escape

from trainteam.agents.runtime import resume_persona_step, run_persona_step
from trainteam.contract.redaction import redact_text, redacted_task
from trainteam.contract.step_io import (
    Decision,
    NeedsPerson,
    Resume,
    StepInputs,
    StepResult,
    StepTool,
    ToolContext,
    budget_overrun,
)
from trainteam.contract.step_outputs import GateOutput
from trainteam.contract.train_task import TrainTask
from trainteam.core import clock, heap
from trainteam.core.errors import Conflict, NotFound, RunStopped, TrainteamError
from trainteam.graph.record import record_run, record_step
from trainteam.trainers.training import budget, console_lines
from trainteam.trainers.training.threads import Sample, cpu_sample, run_threads
from trainteam.workflows.engine import approvals
from trainteam.workflows.engine.approval_ids import short_id
from trainteam.workflows.engine.approvals import EngineWorkspace
from trainteam.workflows.engine.executors import APP_NAME, RUN_QUEUE, WORKFLOW_NAME, Lease, new_executor_id
from trainteam.workflows.engine.spec import StepSpec, WorkflowSpec
from trainteam.workflows.engine.store import RunStore

# The name of a step's re-run after a person approved, by how it resumes (DBOS step names).
RERUN_NAMES = {
    "restart": "restart",
    "accept_stage_gate": "accepted",
    "keep_spiked": "kept",
    "extend_budget": "extended",
    "accept_gate": "accepted",
    "conversation": "decided",
    "accept_curation": "accepted",
}
TRAINING_TOOLS = ("train", "align")

console = Console(stderr=True, soft_wrap=True)


def dbos_config(ws: EngineWorkspace, executor_id: str) -> dict[str, Any]:
    return {
        "name": APP_NAME,
        "system_database_url": ws.dbos_database_url,
        "application_version": ws.settings.app_version,
        "executor_id": executor_id,
        "log_level": "WARNING",
        "notification_listener_polling_interval_sec": ws.settings.notification_polling_s,
    }


def _quiet_cancellations() -> None:
    """A person's `runs cancel`, or a run that stopped with its reason (``RunStopped``, which
    the engine raises so DBOS records ERROR), is not a crash: keep DBOS from logging a traceback."""
    quiet = (dbos_error.DBOSWorkflowCancelledError, dbos_error.DBOSAwaitedWorkflowCancelledError, RunStopped)

    class _DropCancelled(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            exc = record.exc_info[1] if record.exc_info else None
            if isinstance(exc, quiet):
                return False
            return "is no longer owned by this execution" not in record.getMessage()

    logger = logging.getLogger("dbos")
    if not any(isinstance(f, _DropCancelled) for f in logger.filters):
        logger.addFilter(_DropCancelled())


def _decided(d: Decision) -> str:
    return f"{d.status} by {d.decided_by or 'nobody'}" + (f": {d.note}" if d.note else "")


def _extension(task: TrainTask, needs: NeedsPerson, cut_at: list[str]) -> float:
    """Seconds to ask for at a budget ceiling: the task's extension; doubled each time the same step is cut
    again at the same evaluation or generation, which starts over from its first row (training resumes
    from its checkpoint and keeps its steps), so a run approved with ``--yes`` cannot ask forever."""
    where = str(needs.evidence.get("where", ""))
    again = 0 if where.startswith("training") else cut_at.count(where)
    cut_at.append(where)
    return task.budget.extension_s() * 2**again


def _allowed_loops(spec: WorkflowSpec, task: TrainTask, loops: dict[str, int]) -> dict[str, int]:
    """How often each retry edge was taken; without ``allow_retry`` every edge counts as used up."""
    return loops if task.allow_retry else {f"{e.source}->{e.target}": 10**9 for e in spec.edges}


class Engine:
    """This process's workflow engine: one workspace, one executor id (held by its lease while the
    process lives), the step tools it was launched with (``toolbox``: tool name -> ``StepTool``; the engine
    imports no step), each run's log file, and the CPU counters at launch (the thread rule measures
    the neighbours' load since). ``worker``: it takes runs from the run queue, and each line of a
    run's output starts with its run id. ``Engine.running()`` is the one launched in this process: DBOS
    calls a module-level workflow function, which reaches it there."""

    _launched: ClassVar[Engine | None] = None

    def __init__(
        self,
        ws: EngineWorkspace,
        toolbox: Mapping[str, StepTool],
        executor_id: str,
        lease: Lease,
        progress: bool,
        worker: bool,
        cpu_mark: Sample,
    ) -> None:
        self.ws, self.toolbox, self.executor_id, self.lease = ws, toolbox, executor_id, lease
        self.progress, self.prefix, self.cpu_mark = progress, worker, cpu_mark
        self.logs: dict[str, Console] = {}  # run id -> its log file (logs/runs/<run_id>.log)
        self.dbos: DBOS | None = None

    # ------------------------------------------------------------------ the process
    @classmethod
    def launch(
        cls, ws: EngineWorkspace, toolbox: Mapping[str, StepTool], progress: bool = True, worker: bool = False
    ) -> Engine:
        """Launch DBOS in this process with the step tools its runs call (``toolbox``). Only a ``worker`` takes
        runs from the run queue; any launched process holds the lease on its executor id
        (``executors.Lease``) until it ends."""
        ws.check_dbos_database()  # a damaged dbos.sqlite is one line, before DBOS opens it
        if cls._launched is not None:
            raise RuntimeError("the workflow engine is already launched in this process")
        cpu_mark, executor_id = cpu_sample(), new_executor_id()
        lease = Lease.hold(ws.engine, executor_id)  # before any run records this id
        engine = cls(ws, toolbox, executor_id, lease, progress, worker, cpu_mark)
        try:
            engine.dbos = DBOS(config=dbos_config(ws, executor_id))
            DBOS.listen_queues([RUN_QUEUE] if worker else [])
            _quiet_cancellations()
            Engine._launched = engine  # before DBOS.launch: it may recover this executor's runs at once
            DBOS.launch()
        except BaseException:
            engine.shutdown()
            raise
        return engine

    @classmethod
    def running(cls) -> Engine:
        """The engine launched in this process; DBOS's workflow function reaches it here."""
        if cls._launched is None:
            raise RuntimeError("the workflow engine is not launched in this process")
        return cls._launched

    def shutdown(self) -> None:
        if self.dbos is not None:
            DBOS.destroy()
            self.dbos = None
        if Engine._launched is self:
            Engine._launched = None
        self.lease.release()
        for log in self.logs.values():
            log.file.close()
        self.logs.clear()

    # ------------------------------------------------------------------ what a run says
    def say(self, text: str, run_id: str | None = None) -> None:
        """A line of the run's output: to its log file, and (with progress) to stderr, prefixed by
        the run id in a worker, where several runs' lines meet."""
        run_id = run_id or DBOS.workflow_id
        if run_id is not None:
            self._run_log(run_id).print(text)
        if self.progress:
            console.print(f"{escape('[' + run_id + ']')} {text}" if self.prefix and run_id else text)

    def _run_log(self, run_id: str) -> Console:
        log = self.logs.get(run_id)
        if log is None:
            folder = self.ws.dir("logs") / "runs"
            folder.mkdir(exist_ok=True)
            log = Console(
                file=open(folder / f"{run_id}.log", "a", encoding="utf-8"),
                soft_wrap=True,
                color_system=None,
                force_terminal=False,
                width=200,
            )
            self.logs[run_id] = log
        return log

    # ------------------------------------------------- steps (DBOS checkpoints their results)
    def _runs(self) -> RunStore:
        return RunStore(self.ws.engine)

    def _mark_started(self, run_id: str, workflow: str, task_name: str) -> None:
        self._runs().set_status(run_id, "running", executor_id=self.executor_id)
        record_run(self.ws.graph, run_id, workflow=workflow, task=task_name)

    def _spent(self, run_id: str, cost_per_hour: float) -> dict[str, float]:
        seconds = sum(float(a["seconds"] or 0) for a in self._runs().attempts(run_id))
        return {"seconds": seconds, "cost_usd": seconds / 3600 * cost_per_hour}

    def _fix_threads(self, run_id: str, task: TrainTask) -> int:
        """The torch thread count of the whole run, by the one rule (``threads.run_threads``), measured
        over the neighbours' load since this process started (its own CPU time subtracted)."""
        n = run_threads(task.threads, since=self.cpu_mark, sample_s=0.5)
        self._runs().merge_metrics(run_id, {"run.threads": n})
        return n

    def _execute_step(
        self,
        run_id: str,
        name: str,
        visit: int,
        spec: WorkflowSpec,
        task: TrainTask,
        outputs: dict[str, StepResult],
        decided: StepInputs,
        decision: dict | None = None,
        allowed_s: float | None = None,
        execution: str = "",
    ) -> dict[str, Any]:
        """One step, run by its persona's Agent. ``decided``: the StepInputs people's decisions set
        for this visit. ``decision`` continues a persona run that stopped on a gated tool call, with
        the person's decision read from the queue. ``allowed_s``: what the run may spend in all; the
        step works under the rest as its ceiling."""
        step = spec.step(name)
        runs = self._runs()
        # the executor too: a run a worker recovered has a new owner
        runs.set_status(run_id, "running", current_step=name, executor_id=self.executor_id)
        attempt = runs.start_attempt(run_id, name, visit, step.persona, self.executor_id)
        record_step(self.ws.graph, run_id, name, visit, persona=step.persona, tool=step.tool)
        t0 = clock.now()
        if not spec.applies(step, task.stages):
            stages = "/".join(step.stage or [])
            out = StepResult(outcome="skipped", summary=f"stage {stages} not in the task").model_dump(mode="json")
            runs.finish_attempt(attempt, "skipped", 0.0, out)
            self.say(f"  [dim]· {name}: skipped ({stages} not in stages)[/dim]")
            return out
        if decision is None:
            self.say(f"[bold]▶ {name}[/bold] [cyan]({step.persona})[/cyan]")
        spent_s = self._spent(run_id, 0.0)["seconds"]
        allowed_s = task.budget.allowed_s() if allowed_s is None else allowed_s
        ctx = ToolContext(
            ws=self.ws,
            run_id=run_id,
            step=name,
            visit=visit,
            persona=step.persona,
            task=task,
            outputs=outputs,
            inputs=step.inputs,
            decided=decided,
            toolbox=self.toolbox,
            progress=self.progress,
            spent_s=spent_s,
            allowed_s=allowed_s,
            execution=execution or f"{name}#{visit}",
        )
        try:
            result = self._run_persona(ctx, step.tool, decision, spent_s, allowed_s)
        except Exception as exc:  # the run fails with the reason; the traceback stays in the log
            return self._step_failed(runs, attempt, name, exc, clock.now() - t0)
        finally:
            heap.give_back()  # what the step freed, before the next loads its own model (core/heap.py)
        return self._step_done(runs, attempt, run_id, name, result, clock.now() - t0)

    def _run_persona(
        self, ctx: ToolContext, tool: str, decision: dict | None, spent_s: float, allowed_s: float
    ) -> StepResult:
        """The persona runs the step under the budget's ceiling; reaching it mid-way (an eval or a
        generation loop) is a question for a person, like a trainer that stopped at the ceiling."""
        try:
            with (
                budget.ceiling(allowed_s - spent_s, allowed_s),
                console_lines.lines_to(lambda text: self.say(text, ctx.run_id)),
            ):  # the work's own lines
                if decision is None:
                    return run_persona_step(ctx, tool)
                return resume_persona_step(
                    ctx, tool, decision["pending"], decision["status"] == "approved", decision.get("note")
                )
        except budget.BudgetExceeded as exc:
            where = {"where": exc.where, "overrun_s": round(exc.late_s, 2)}
            carried = ctx.decided.before
            return StepResult(
                outcome="over_budget",
                summary=str(exc),
                details={**where, **carried.model_dump()},
                needs=budget_overrun(ctx.step, ctx.task.budget, allowed_s, where, carried),
            )

    def _step_failed(self, runs: RunStore, attempt: int, name: str, exc: Exception, seconds: float) -> dict[str, Any]:
        # a library's message may echo a key: masked before it is stored, printed or checkpointed
        message = redact_text(f"{type(exc).__name__}: {exc}".splitlines()[0])
        runs.finish_attempt(attempt, "failed", seconds, None, message)
        if not isinstance(exc, TrainteamError):  # a bug, not bad input: keep the traceback (masked too)
            logging.getLogger("trainteam").warning("step %s failed\n%s", name, redact_text(traceback.format_exc()))
        self.say(f"[red]✗ {name} failed:[/red] {escape(message)}")  # text, not markup: '[/x]' would raise
        return StepResult(outcome="error", summary=message).model_dump(mode="json")

    def _step_done(
        self, runs: RunStore, attempt: int, run_id: str, name: str, result: StepResult, seconds: float
    ) -> dict[str, Any]:
        out = result.model_dump(mode="json")
        status: str
        if result.needs is not None:
            status = result.outcome
        else:
            status = {"needs_approval": "needs_approval", "error": "failed"}.get(result.outcome, "completed")
        # The whole output (curves, evals, decisions) feeds the run report; a paused persona's
        # conversation stays in DBOS's record only.
        recorded = (
            out
            if result.needs is None or result.needs.resume.pending is None
            else {**out, "needs": {**out["needs"], "resume": {**out["needs"]["resume"], "pending": None}}}
        )
        runs.finish_attempt(attempt, status, seconds, recorded, result.summary if status == "failed" else None)
        if result.outcome == "error":
            self.say(f"[red]✗ {name} failed:[/red] {escape(result.summary)}")
            return out
        if result.needs is not None:
            return out
        runs.merge_metrics(run_id, {f"{name}.{k}": v for k, v in result.metrics.items()})
        mark = {"passed": "[green]✓ passed[/green]", "failed": "[red]✗ failed[/red]"}.get(
            result.outcome, "[green]✓[/green]"
        )
        self.say(f"  {mark} {name}: {escape(result.summary)} [dim]({seconds:.1f}s)[/dim]")
        return out

    def _open_approval(
        self, run_id: str, name: str, visit: int, action: str, proposed: dict, evidence: dict, requested_by: str
    ) -> dict[str, Any]:
        # The run waits before its approval is listed, so a person who finds the approval finds the run waiting.
        self._runs().set_status(run_id, "waiting_approval", current_step=name)
        row = approvals.request(
            self.ws,
            run_id=run_id,
            step=name,
            visit=visit,
            action=action,
            proposed=proposed,
            evidence=evidence,
            requested_by=requested_by,
        )
        self.say(
            f"[yellow]⏸ {name}: waiting for a person to approve {action}[/yellow] — the evidence: "
            f"`trainteam approvals show {short_id(row['id'])}`, then `approve` or `reject` it"
        )
        return {"id": row["id"], "status": row["status"]}

    def _read_decision(self, approval_id: str) -> dict[str, Any]:
        return approvals.read_decision(self.ws, approval_id)

    def _resumed(self, run_id: str) -> None:
        self._runs().set_status(run_id, "running", executor_id=self.executor_id)

    def _finish(self, run_id: str, status: str, error: str | None) -> dict[str, Any]:
        error = None if error is None else redact_text(error)  # it becomes DBOS's output and RunStopped's result
        self._runs().set_status(run_id, status, error=error, current_step=None)
        if status == "completed":
            self.say(f"[bold green]run {run_id} completed[/bold green]")
        else:
            self.say(f"[bold red]run {run_id} {status}:[/bold red] {escape(str(error))}")
        return {"run_id": run_id, "status": status, "error": error}

    # ------------------------------------------------------------------ the workflow
    def await_approval(
        self,
        run_id: str,
        name: str,
        visit: int,
        action: str,
        proposed: dict,
        evidence: dict,
        requested_by: str,
        wait_s: float,
    ) -> Decision:
        """Open an approval and wait durably for a person's decision.

        The decision in the database is authoritative; a message only wakes the run.
        If the decision was recorded while no process lived, the first read finds it.
        """
        opened = DBOS.run_step(
            {"name": f"approval:{name}#{visit}:{action}"},
            self._open_approval,
            run_id,
            name,
            visit,
            action,
            proposed,
            evidence,
            requested_by,
        )
        approval_id = opened["id"]
        decision = DBOS.run_step({"name": f"decision:{approval_id}"}, self._read_decision, approval_id)
        deadline_checks = 0
        while decision["status"] == "pending":
            msg = DBOS.recv(approvals.approval_topic(approval_id), timeout_seconds=wait_s)
            deadline_checks += 1
            decision = DBOS.run_step(
                {"name": f"decision:{approval_id}:{deadline_checks}"}, self._read_decision, approval_id
            )
            if msg is None and decision["status"] == "pending":
                return Decision.model_validate({**decision, "status": "expired"})
        DBOS.run_step({"name": f"resume:{approval_id}"}, self._resumed, run_id)
        return Decision.model_validate(decision)  # the checkpointed record, typed where the engine reads it

    def _ask(
        self,
        run_id: str,
        current: str,
        visit: int,
        needs: NeedsPerson,
        wait_s: float,
        rounds: int = 0,
        summary: str | None = None,
    ) -> Decision:
        """The one way the engine asks a person: ``needs`` as an approval; returns the decision."""
        action = f"{needs.action}_{rounds}" if needs.numbered else needs.action
        evidence = needs.evidence if summary is None else {"summary": summary, **needs.evidence}
        return self.await_approval(run_id, current, visit, action, needs.proposed, evidence, needs.requested_by, wait_s)

    def _step(
        self,
        run: _Run,
        current: str,
        visit: int,
        outputs: dict[str, StepResult],
        decided: StepInputs,
        decision: dict | None,
        allowed_s: float,
        execution: str,
    ) -> StepResult:
        """A step visit's execution as a DBOS step named ``execution``: DBOS checkpoints its JSON, which
        becomes a typed ``StepResult`` here — the one place the engine reads a step's result."""
        out = DBOS.run_step(
            {"name": execution},
            self._execute_step,
            run.run_id,
            current,
            visit,
            run.spec,
            run.task,
            dict(outputs),
            decided,
            decision,
            allowed_s,
            execution,
        )
        return StepResult.model_validate(out)

    def _ask_until_answered(
        self,
        run: _Run,
        current: str,
        visit: int,
        out: StepResult,
        outputs: dict[str, StepResult],
        decided: StepInputs,
        allowed_s: float,
    ) -> tuple[StepResult, float, str | None]:
        """While the step needs a person, ask and re-run it as the decision says. Returns (its last
        output, the seconds of budget granted meanwhile, the run's error if a person said no)."""
        granted, rounds = 0.0, 0
        cut_at: list[str] = []
        while out.needs is not None:
            rounds += 1
            needs = out.needs
            extension = run.task.budget.extension_s()
            if needs.resume.kind == "extend_budget":
                extension = _extension(run.task, needs, cut_at)
                needs = needs.model_copy(
                    update={"proposed": {**needs.proposed, "extra_minutes": round(extension / 60, 2)}}
                )
            d = self._ask(run.run_id, current, visit, needs, run.wait_s, rounds, summary=out.summary)
            approved = d.status == "approved"
            decision = None
            if needs.resume.kind == "conversation":  # the persona's conversation goes on with the decision
                decision = {"pending": needs.resume.pending, "status": d.status, "note": d.note}
            elif not approved:
                return out, granted, f"{out.summary}; {needs.refused} {_decided(d)}"
            else:
                granted += extension if needs.resume.kind == "extend_budget" else 0.0
                decided = decided.after(needs, d)
            execution = f"{current}#{visit}.{RERUN_NAMES[needs.resume.kind]}{rounds}"
            out = self._step(run, current, visit, outputs, decided, decision, allowed_s + granted, execution)
            if decision is not None and not approved:
                return out, granted, f"{needs.action} at {current} was {_decided(d)}"
        return out, granted, None

    def _stop(self, run_id: str, status: str, error: str) -> NoReturn:
        """End the run as ``status``: recorded in the workspace, then raised so DBOS records ERROR."""
        result = DBOS.run_step({"name": "finish"}, self._finish, run_id, status, error)
        raise RunStopped(result)

    def _before_step(
        self, run: _Run, current: str, visit: int, step: StepSpec, outputs: dict[str, StepResult], allowed_s: float
    ) -> tuple[float, str | None]:
        """The checks before a step starts: the budget, and a person's go-ahead where the task asks
        for one. Returns (seconds of budget granted, the run's error if it must stop)."""
        granted, task = 0.0, run.task
        spent = DBOS.run_step(
            {"name": f"budget:{current}#{visit}"}, self._spent, run.run_id, task.budget.cost_per_hour_usd
        )
        if spent["seconds"] > allowed_s:
            needs = budget_overrun(current, task.budget, allowed_s, {"spent": spent}, numbered=False)
            d = self._ask(run.run_id, current, visit, needs, run.wait_s)
            if d.status != "approved":
                return 0.0, (f"budget exceeded before {current} ({spent['seconds']:.0f}s spent); approval {d.status}")
            granted = task.budget.extension_s()
        if current in task.require_approval:
            needs = NeedsPerson(
                action="run_step",
                proposed={"step": current, "tool": step.tool, "persona": step.persona},
                evidence={"completed_steps": list(outputs)},
                requested_by=step.persona,
                resume=Resume(kind="go_ahead"),
            )
            d = self._ask(run.run_id, current, visit, needs, run.wait_s)
            if d.status != "approved":
                note = f": {d.note}" if d.note else ""
                return granted, f"step {current} was {d.status} by {d.decided_by or 'nobody'}{note}"
        return granted, None

    def _accept_failed_gate(
        self,
        run: _Run,
        current: str,
        visit: int,
        step: StepSpec,
        out: StepResult,
        outputs: dict[str, StepResult],
        loops: dict,
        allowed_s: float,
    ) -> StepResult:
        """``on_gate_failure: ask`` and no retry left, or the judge's plan says a retry cannot help: a
        person may accept the failed gate, seeing the judge's diagnosis and plan in the evidence."""
        nxt_if_failed, _ = run.spec.next_step(current, "failed", _allowed_loops(run.spec, run.task, loops))
        gate = GateOutput.of(out)
        diagnosis = dict(gate.diagnosis or {})
        plan = diagnosis.pop("plan", None)
        if nxt_if_failed is not None and (plan or {}).get("action") not in ("stop", "more_data"):
            return out
        evidence = {
            "reasons": gate.reasons,
            **({"diagnosis": diagnosis, "plan": plan} if plan else {}),
        }
        needs = NeedsPerson(
            action="accept_failed_gate",
            proposed={"gate": current, "stage": out.stage},
            evidence=evidence,
            requested_by=step.persona,
            resume=Resume(kind="accept_gate"),
        )
        d = self._ask(run.run_id, current, visit, needs, run.wait_s)
        if d.status != "approved":
            return out
        decided = StepInputs().after(needs, d)
        return self._step(run, current, visit, outputs, decided, None, allowed_s, f"{current}#{visit}.accepted")

    def _visit(
        self, run: _Run, current: str, visit: int, outputs: dict[str, StepResult], loops: dict, allowed_s: float
    ) -> tuple[StepResult | None, float, str | None]:
        """One visit of a step: the checks before it, the step, a person's answers to what it asked,
        and (a failed gate with ``on_gate_failure: ask``) a person's acceptance.
        Returns (its output, the seconds of budget granted, the run's error if it must stop)."""
        step, task = run.spec.step(current), run.task
        granted = 0.0
        if run.spec.applies(step, task.stages):
            granted, error = self._before_step(run, current, visit, step, outputs, allowed_s)
            if error:
                return None, granted, error
        out = self._step(run, current, visit, outputs, StepInputs(), None, allowed_s + granted, f"{current}#{visit}")
        out, more, error = self._ask_until_answered(
            run, current, visit, out, outputs, StepInputs(), allowed_s + granted
        )
        granted += more
        if error:
            return out, granted, error
        if step.gate and out.outcome == "failed" and task.on_gate_failure == "ask":
            out = self._accept_failed_gate(run, current, visit, step, out, outputs, loops, allowed_s + granted)
        if out.outcome == "error":
            return out, granted, f"step {current}: {out.summary}"
        return out, granted, None

    def run(self, run_id: str, spec: WorkflowSpec, task: TrainTask) -> dict[str, Any]:
        """The workflow's body: walk the spec's graph from its start, one visit at a time."""
        DBOS.run_step({"name": "start"}, self._mark_started, run_id, spec.name, task.name)
        run = _Run(run_id, spec, task, self.ws.settings.approval_wait_s)
        fixed = False
        allowed_s = task.budget.allowed_s()
        outputs: dict[str, StepResult] = {}
        visits: Counter[str] = Counter()
        loops: dict[str, int] = {}
        current: str | None = spec.start
        while current is not None:
            step = spec.step(current)
            visits[current] += 1
            if spec.applies(step, run.task.stages) and step.tool in TRAINING_TOOLS and not fixed:
                # Weights depend on the thread count: chosen once as training starts, recorded by DBOS
                # (a resumed run keeps it) and in the task every later step sees (a replay keeps it).
                threads = DBOS.run_step({"name": "threads"}, self._fix_threads, run_id, run.task)
                run.task = run.task.model_copy(update={"threads": threads})
                fixed = True
            out, granted, error = self._visit(run, current, visits[current], outputs, loops, allowed_s)
            allowed_s += granted
            if error is None and out is not None:
                nxt, loop_key = spec.next_step(current, out.outcome, _allowed_loops(spec, run.task, loops))
                if nxt is None and step.gate and out.outcome == "failed":
                    error = out.summary
            if error or out is None:  # the one way a run fails
                self._stop(run_id, "failed", error or f"step {current} gave no result")
            outputs[current] = out
            if loop_key:
                loops[loop_key] = loops.get(loop_key, 0) + 1
            current = nxt
        return DBOS.run_step({"name": "finish"}, self._finish, run_id, "completed", None)

    # ------------------------------------------------------------------ entry points
    def start(self, spec: WorkflowSpec, task: TrainTask, run_id: str) -> WorkflowHandle:
        # The task as stored and as the workflow's input, which the run itself reads: a key pasted into its
        # description is masked in both; one in a field the run uses is refused before anything is written.
        task_data = redacted_task(task.stored())
        self._runs().create(run_id, spec.name, task_data)
        with SetWorkflowID(run_id):
            return DBOS.start_workflow(run_workflow, run_id, spec.model_dump(mode="json", by_alias=True), task_data)

    def resume(self, run_id: str, force: bool = False) -> WorkflowHandle:
        """Continue a run whose process died. Finished steps are not run again."""
        status = DBOS.get_workflow_status(run_id)
        if status is None:
            raise NotFound(f"run {run_id!r} not found in the workflow engine")
        if status.status in ("SUCCESS", "ERROR", "CANCELLED"):
            return DBOS.retrieve_workflow(run_id)
        if status.status == "ENQUEUED":
            raise Conflict(f"run {run_id} is queued: a `trainteam worker` will run it")
        if (
            status.status == "PENDING"
            and status.executor_id != self.executor_id
            and not force
            and self._runs().executor_alive(status.executor_id)
        ):
            raise Conflict(f"run {run_id} is being executed by live process {status.executor_id}")
        return DBOS.resume_workflow(run_id)

    @staticmethod
    def register_queue(worker_concurrency: int | None, global_concurrency: int | None, poll_s: float) -> Queue:
        """The run queue, its limits stored in the system database (the last worker started sets them)."""
        return DBOS.register_queue(
            RUN_QUEUE,
            worker_concurrency=worker_concurrency,
            global_concurrency=global_concurrency,
            polling_interval_sec=poll_s,
            on_conflict="always_update",
        )

    def recover_dead(self) -> list[str]:
        """Hand the pending runs of every executor whose lease is free (its process died, on any host)
        back to the run queue, where DBOS gives each to one live worker (its atomic ENQUEUED ->
        PENDING claim). What DBOS's own recovery does for a restarted executor, with the run queue (and
        its limits) instead of DBOS's internal queue, which every launched process takes from."""
        runs = self._runs()
        pending = DBOS.list_workflows(
            status="PENDING",
            name=WORKFLOW_NAME,
            app_version=DBOS.application_version,
            load_input=False,
            load_output=False,
        )
        dead = {
            st.executor_id
            for st in pending
            if st.executor_id != self.executor_id and not runs.executor_alive(st.executor_id)
        }
        return [
            st.workflow_id
            for st in sorted(pending, key=lambda st: st.executor_id or "")
            if st.executor_id in dead and self._hand_back(st.workflow_id, st.executor_id)
        ]

    def _hand_back(self, workflow_id: str, dead_executor: str) -> bool:
        """Put a dead executor's PENDING run back on the run queue, once; False where another worker does or the
        run is no longer PENDING there. DBOS's public calls only, in this order:

        1. one worker claims the hand-back of this run from this dead executor (``RunStore.claim_handback``):
           ``DBOS.resume_workflow`` re-enqueues a run in any state but SUCCESS/ERROR, so of two workers that both
           saw the run PENDING under the dead executor, the second would otherwise queue it again after a third
           had taken it (one run executed twice);
        2. the run must still be PENDING under the dead executor (``DBOS.get_workflow_status``);
        3. ``DBOS.resume_workflow(id, queue_name=RUN_QUEUE)`` queues it for the workers (DBOS's own recovery would
           put it on DBOS's internal queue, which every launched process takes from);
        4. a person's cancel that came between 2 and 3 is made again: ``runs cancel`` marks the run cancelled in
           trainteam's store before it cancels it in DBOS (``approvals.cancel_run``), so either the run is read
           cancelled here, or its DBOS cancel comes after the resume: a cancelled run stays cancelled."""
        runs = self._runs()
        if not runs.claim_handback(workflow_id, dead_executor, self.executor_id):
            return False
        status = DBOS.get_workflow_status(workflow_id)
        if status is None or status.status != "PENDING" or status.executor_id != dead_executor:
            return False
        DBOS.resume_workflow(workflow_id, queue_name=RUN_QUEUE)
        if (runs.get(workflow_id) or {}).get("status") == "cancelled":
            DBOS.cancel_workflow(workflow_id)
        return True

    def queue_busy(self) -> bool:
        """Runs waiting on the run queue, or running in this process."""
        queued = DBOS.list_workflows(status="ENQUEUED", queue_name=RUN_QUEUE, load_input=False, load_output=False)
        mine = DBOS.list_workflows(status="PENDING", executor_id=self.executor_id, load_input=False, load_output=False)
        return bool(queued or mine)


class _Run:
    """One run as its workflow walks it: the id, the spec and the task validated once from the workflow's
    input (the task gains its thread count as training starts), and how long an approval waits."""

    def __init__(self, run_id: str, spec: WorkflowSpec, task: TrainTask, wait_s: float) -> None:
        self.run_id, self.spec, self.task, self.wait_s = run_id, spec, task, wait_s


@DBOS.workflow(name=WORKFLOW_NAME)
def run_workflow(run_id: str, spec_data: dict, task_data: dict) -> dict[str, Any]:
    """A run, as DBOS registers and replays it: its input (JSON) validated once, then the engine walks it."""
    return Engine.running().run(run_id, WorkflowSpec.model_validate(spec_data), TrainTask.model_validate(task_data))
