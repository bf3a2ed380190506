"""Run one workflow step as its persona: the entry points the workflow engine calls.

``run_persona_step`` builds the persona's Agent (only its tools, typed deps and
output, instructions from its card), lets the model — the offline policy by default —
call the step's tool, and returns the tool's StepResult with the persona's report in
``details["persona"]``. A gated call ends the agent run with pydantic-ai's
``DeferredToolRequests``; the step then returns ``outcome="needs_approval"`` with a
JSON ``pending`` that ``resume_persona_step`` continues in any process once a person
decided (``DeferredToolResults``: ``ToolApproved`` / ``ToolDenied``).
"""

from __future__ import annotations

import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolApproved, ToolDenied, capture_run_messages
from pydantic_ai.exceptions import UnexpectedModelBehavior

from trainteam.agents import briefing, transcripts
from trainteam.agents.cards import PersonaCard, load_card
from trainteam.agents.hooks import ensure_step_node, graph_hooks
from trainteam.agents.persona import PersonaDeps, PersonaReport, build_agent
from trainteam.agents.policy import StepFacts, offline_model
from trainteam.agents.providers import build_model, choose_model, provider_errors, provider_failure
from trainteam.agents.redact import redact
from trainteam.workflows.steps import TOOLS, StepResult, ToolContext
from trainteam.agents.toolbox import sha256_file

PENDING_VERSION = 1


def _result(**fields: Any) -> StepResult:
    return StepResult(**fields)


def _error(summary: str, **details: Any) -> StepResult:
    return StepResult(outcome="error", summary=summary, details=details)


def _facts(ctx: ToolContext, card: PersonaCard, tool: str) -> StepFacts:
    grant = card.grant(tool)
    facts = StepFacts(persona=card.name, step=ctx.step, visit=ctx.visit, tool=tool,
                      plan_first=bool(grant and grant.plan_first))
    if tool == "gate" and ctx.inputs.get("accepted") is None:  # the judge re-derives the gate from the metric
        # (a failed gate a person accepted is the person's decision: the judge does not second-guess it)
        try:
            from trainteam.workflows.steps.judge import gate_rules

            ev = ctx.output(ctx.inputs.get("of", "evaluate"))
            spec = next((r for r in gate_rules(ctx.task, ev.get("details", {}).get("stage")) if r.min is not None),
                        None)
        except LookupError:
            spec, ev = None, {}
        if spec is not None:
            facts.gate_metric, facts.gate_min = spec.metric, spec.min
            facts.measured = dict(ev.get("metrics") or {})
    return facts


_VOLATILE_KEYS = ("seconds", "time", "timestamp", "created_at", "updated_at", "wall", "elapsed", "duration")
_SKIP = ("training_args.bin", "trainer_state.json", "run-history.jsonl", "optimizer.pt", "scheduler.pt",
         "trainteam-manifest.json")  # the manifest hashes training_args.bin, which names the folder


def _canonical(value: Any, root: str) -> Any:
    """JSON without timings, with the workspace root made relative: the content, not the occasion."""
    if isinstance(value, dict):
        return {k: _canonical(v, root) for k, v in value.items()
                if not (k in _VOLATILE_KEYS or k.endswith(("_s", "_seconds", "_at")))}
    if isinstance(value, list):
        return [_canonical(v, root) for v in value]
    return value.replace(root, "<workspace>") if isinstance(value, str) else value


def _file_hash(path: Path, root: str) -> str:
    st = path.stat()  # the same checkpoint is an artifact of several steps: hash its bytes once per process
    return _cached_hash(str(path), st.st_size, st.st_mtime_ns, root)


@lru_cache(maxsize=4096)
def _cached_hash(path_s: str, size: int, mtime_ns: int, root: str) -> str:
    import hashlib
    import json

    path = Path(path_s)
    if path.suffix == ".json":
        try:
            data = json.loads(path.read_text())
        except ValueError:
            return sha256_file(path)
        return hashlib.sha256(json.dumps(_canonical(data, root), sort_keys=True).encode()).hexdigest()
    return sha256_file(path)


def artifact_hashes(result: StepResult, root: Path | str) -> dict[str, str]:
    """Content hashes of a step's artifacts that two equal runs share: weights, configs, tokenizers,
    data; not timings, pickled arguments, intermediate checkpoints or the workspace path."""
    import hashlib

    hashes = {}
    for name, value in result.artifacts.items():
        p = Path(value)
        if p.is_file():
            hashes[name] = _file_hash(p, str(root))
        elif p.is_dir():
            h = hashlib.sha256()
            for f in sorted(p.rglob("*")):
                rel = f.relative_to(p)
                if f.is_file() and f.name not in _SKIP and not any(x.startswith("checkpoint-") for x in rel.parts):
                    h.update(str(rel).encode() + b"\0" + _file_hash(f, str(root)).encode())
            hashes[name] = h.hexdigest()
    return hashes


class _Session:
    """One agent run of one step (possibly resumed): builds, runs, records, maps the result."""

    def __init__(self, ctx: ToolContext, tool: str, segment: str | None = None, model: Any = None):
        self.ctx, self.tool = ctx, tool
        self.card = load_card(ctx.persona)
        ensure_step_node(ctx)  # the engine makes it; a persona run outside the engine needs it too
        self.segment = segment or transcripts.choose_segment(ctx.ws, ctx.run_id, ctx.step, ctx.visit)
        choice = choose_model(ctx.persona)
        self.choice = None if model is not None else choice
        if model is not None:
            self.model, self.model_desc = model, f"given:{getattr(model, 'model_name', type(model).__name__)}"
        elif choice.offline:
            self.model, self.model_desc = offline_model(_facts(ctx, self.card, tool)), "offline"
        else:
            self.model, self.model_desc = build_model(choice), choice.describe()
        self.instructions = briefing.instructions(ctx, self.card, tool)
        self.allowed = [n for n in self.card.tool_names if n in TOOLS]  # exactly what the Agent registers
        self.deps = PersonaDeps(ctx=ctx, card=self.card, step_tool=tool, segment=self.segment)
        self.agent = build_agent(self.card, self.model, instructions=self.instructions, capabilities=[graph_hooks()])
        self.record: dict[str, Any] = {
            "run_id": ctx.run_id, "step": ctx.step, "visit": ctx.visit, "segment": self.segment,
            "persona": self.card.name, "tool": tool, "model": self.model_desc, "instructions": self.instructions,
            "prompt": briefing.step_prompt(ctx, tool), "skills": briefing.loaded_skills(ctx, self.card),
            "tools": self.allowed,
            "task": ctx.task.model_dump(mode="json"),
            "inputs": {k: v for k, v in ctx.inputs.items()}, "approvals": [],
            "outputs": ctx.outputs,  # what earlier steps handed this one (paths, metrics): replay starts from it
            "started_at": transcripts.utcnow(),
        }

    # -- running ---------------------------------------------------------
    def run(self, **kwargs: Any) -> StepResult:
        t0 = time.monotonic()
        with capture_run_messages() as captured:
            try:
                result = self.agent.run_sync(deps=self.deps, **kwargs)
            except UnexpectedModelBehavior as exc:
                return self._failed(captured, exc, t0)
            except provider_errors() as exc:  # the provider failed: one line, no request, no body, no key
                summary = provider_failure(self.card.name, exc, self.model, self.choice)
                path = self._write(captured, "error", t0, error=summary)
                return _error(summary, transcript=str(path), persona=self.card.name)
            except Exception as exc:  # the tool's own failure: recorded, then handed to the engine as is
                self._write(captured, "error", t0, error=f"{type(exc).__name__}: {exc}".splitlines()[0])
                raise
        return self._finish(result, t0)

    def _failed(self, messages, exc: UnexpectedModelBehavior, t0: float) -> StepResult:
        allowed = ", ".join(self.allowed)
        unknown = sorted({p.tool_name for m in messages if m.kind == "response" for p in m.parts
                          if getattr(p, "part_kind", "") == "tool-call" and p.tool_name not in self.allowed
                          and not p.tool_name.startswith("final_result")})
        if unknown:
            summary = (f"{self.card.name} called unknown tool {', '.join(repr(u) for u in unknown)} "
                       f"(its tools: {allowed}); gave up after retries")
        else:
            summary = f"{self.card.name}: the model misbehaved: {exc.message}"
        path = self._write(messages, "error", t0, error=summary)
        from trainteam.agents.hooks import log_tool_call

        for m in messages:
            for p in getattr(m, "parts", []):
                if getattr(p, "part_kind", "") == "tool-call" and p.tool_name in unknown:
                    log_tool_call(self.deps, p.tool_call_id, p.tool_name, p.args_as_dict(), "unknown_tool",
                                  error=f"unknown tool {p.tool_name!r}; allowed: {allowed}")
        return _error(redact(summary), transcript=str(path), persona=self.card.name)

    def _finish(self, result, t0: float) -> StepResult:
        messages = result.all_messages()
        output = result.output
        if isinstance(output, DeferredToolRequests):
            return self._needs_approval(output, messages, t0)
        report: PersonaReport = output
        tool_result = self.deps.results.get(self.tool)
        persona = {"persona": self.card.name, "decision": report.decision, "summary": report.summary,
                   "reasons": report.reasons, "model": self.model_desc}
        if tool_result is None:
            step = _error(f"{self.card.name} did not run {self.tool}: {report.summary}", persona=persona)
        else:
            step = tool_result.model_copy(deep=True)
            if (self.tool == "gate" and step.outcome == "passed" and report.decision == "fail"
                    and self.ctx.inputs.get("accepted") is None):
                step.outcome = "failed"  # a gate fails if the judge or the rule says so; never the reverse
                step.summary = f"gate failed by the judge: {'; '.join(report.reasons)}"
            step.details = {**step.details, "persona": persona}
        path = self._write(messages, "completed" if step.outcome != "error" else "error", t0, result=step)
        step.details["persona"]["transcript"] = str(path)
        # the result goes on to the engine's database and DBOS checkpoints: a model's words are masked there too
        return StepResult.model_validate(redact(step.model_dump(mode="json")))

    def _needs_approval(self, output: DeferredToolRequests, messages, t0: float) -> StepResult:
        calls = [{"tool_call_id": c.tool_call_id, "tool_name": c.tool_name, "args": c.args_as_dict()}
                 for c in output.approvals]
        path = self._write(messages, "needs_approval", t0, pending_calls=calls)
        pending = redact({
            "version": PENDING_VERSION, "persona": self.card.name, "tool": self.tool, "segment": self.segment,
            "started_at": self.record["started_at"], "messages": transcripts.dump_messages(messages),
            "approvals": calls, "metadata": {k: v for k, v in output.metadata.items()},
        })
        first = calls[0]
        meta = output.metadata.get(first["tool_call_id"], {})
        proposed = redact({"tool": first["tool_name"], "args": first["args"], "step": self.ctx.step,
                           "persona": self.card.name, "plan": meta.get("plan")})
        return _result(outcome="needs_approval", summary=f"{self.card.name} asks a person to approve "
                       f"{first['tool_name']}", details={"pending": pending, "action": first["tool_name"],
                                                          "proposed": proposed, "transcript": str(path)})

    def _write(self, messages, status: str, t0: float, *, result: StepResult | None = None,
               error: str | None = None, pending_calls: list | None = None) -> Path:
        rec = {**self.record, "status": status, "messages": transcripts.dump_messages(list(messages)),
               "seconds": round(time.monotonic() - t0, 3) + self.record.get("seconds_before", 0.0)}
        if result is not None:
            rec["result"] = result.model_dump(mode="json")
            rec["artifact_hashes"] = artifact_hashes(result, self.ctx.ws.root)
        if error:
            rec["error"] = error
        if pending_calls is not None:
            rec["pending"] = pending_calls
        return transcripts.write(self.ctx.ws, rec)


def run_persona_step(ctx: ToolContext, tool_name: str, *, model: Any = None) -> StepResult:
    """Run ``tool_name`` for this step as ``ctx.persona`` (model: settings, or the offline policy).

    ``model`` overrides the settings (tests, replay). A tool outside the persona's card is
    refused before any model is asked.
    """
    card = load_card(ctx.persona)
    if card.grant(tool_name) is None or tool_name not in TOOLS:
        allowed = ", ".join(n for n in card.tool_names if n in TOOLS)
        why = "is not a known tool" if tool_name not in TOOLS else f"is not one of {ctx.persona}'s tools"
        return _error(f"{tool_name!r} {why} (its tools: {allowed})", persona=ctx.persona)
    session = _Session(ctx, tool_name, model=model)
    return session.run(user_prompt=session.record["prompt"])


def resume_persona_step(ctx: ToolContext, tool_name: str, pending: dict, approved: bool, note: str | None,
                        *, model: Any = None) -> StepResult:
    """Continue the conversation in ``pending`` with a person's decision on its gated call(s)."""
    from trainteam.core.errors import BadInput

    if not isinstance(pending, dict) or pending.get("version") != PENDING_VERSION or "messages" not in pending:
        raise BadInput("pending: not a pending persona run (expected the details['pending'] of needs_approval)")
    if pending.get("persona") != ctx.persona or pending.get("tool") != tool_name:
        raise BadInput(f"pending: belongs to {pending.get('persona')}/{pending.get('tool')}, "
                       f"not {ctx.persona}/{tool_name}")
    session = _Session(ctx, tool_name, segment=pending.get("segment"), model=model)
    session.record["started_at"] = pending.get("started_at", session.record["started_at"])
    results = DeferredToolResults()
    for call in pending["approvals"]:
        results.approvals[call["tool_call_id"]] = ToolApproved() if approved else ToolDenied(
            f"a person rejected {call['tool_name']}" + (f": {note}" if note else ""))
        session.record["approvals"].append({**call, "approved": approved, "note": note,
                                            "decided_at": transcripts.utcnow()})
    return session.run(message_history=transcripts.load_messages(pending["messages"]), deferred_tool_results=results)
