"""One workflow step run by its persona: the card's Agent, its tools, its model, its record.

``run_persona_step`` builds the persona's pydantic-ai Agent (typed deps and output, only the
card's tools out of the step catalog the engine hands over in ``ctx.toolbox``, instructions
from its card), lets the model — the offline policy by default — call the step's tool, and
returns the tool's StepResult with the persona's report in ``details["persona"]``.

The card decides how a tool may be called:

- ``plan_first``: without ``execute=true`` the tool returns its plan (for training: the run
  planner's accounting per stage) and does nothing else;
- ``requires_approval``: executing raises pydantic-ai's ``ApprovalRequired`` unless a person
  approved this very call, so the agent run ends with ``DeferredToolRequests``; the step then
  returns a ``NeedsPerson`` whose ``resume`` holds the paused conversation (JSON), which
  ``resume_persona_step`` continues in any process once a person decided
  (``DeferredToolResults``: ``ToolApproved`` / ``ToolDenied``).

A tool outside the card is never registered, so an Agent cannot call it: a model that names
one gets pydantic-ai's "unknown tool" retry, then the step fails clearly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pydantic_ai
from pydantic import BaseModel, Field
from pydantic_ai import (
    Agent,
    ApprovalRequired,
    DeferredToolRequests,
    DeferredToolResults,
    RunContext,
    Tool,
    ToolApproved,
    ToolDenied,
    capture_run_messages,
)
from pydantic_ai.exceptions import UnexpectedModelBehavior

from trainteam.agents import briefing, compact, transcripts
from trainteam.agents.bound_models import persona_model
from trainteam.agents.cards import PersonaCard, load_card
from trainteam.agents.hooks import ensure_step_node, graph_hooks, log_tool_call
from trainteam.agents.policy import StepFacts, offline_model
from trainteam.agents.providers import provider_errors, provider_failure
from trainteam.contract.redaction import redact
from trainteam.contract.step_io import (
    NeedsPerson,
    PlanFirstArgs,
    Resume,
    RunArgs,
    StepResult,
    StepTool,
    ToolContext,
)
from trainteam.core.errors import BadInput
from trainteam.core.hashing import artifact_hashes

PENDING_VERSION = 1
pydantic_ai.BANNER_ENABLED = False  # a run's output is the team's: no Logfire banner on a first agent run (issue 31)


# --------------------------------------------------------------------- the Agent
class PersonaReport(BaseModel):
    """What a persona says at the end of its step. The tool's StepResult stays authoritative."""

    summary: str = Field(max_length=2000)
    decision: Literal["proceed", "stop", "pass", "fail"] = "proceed"
    reasons: list[str] = Field(default_factory=list)


OUTPUT_TYPES: list[type[Any]] = [PersonaReport, DeferredToolRequests]


@dataclass
class PersonaDeps:
    """Typed deps of every persona: the step's context (workspace, run, task with its budget)."""

    ctx: ToolContext
    card: PersonaCard
    step_tool: str
    segment: str = ""  # transcript name of this agent run (``train#1``); keys its graph facts
    model: str = ""  # what decides: "offline", a provider's model, or a bound model's registered id
    model_id: str | None = None  # the registered model id when the persona runs on a bound model
    prompt: str = "full"  # full, or compact (agents/compact.py): the brief, tools and results it reads
    results: dict[str, StepResult] = field(default_factory=dict)
    plans: dict[str, dict] = field(default_factory=dict)

    @property
    def workspace(self) -> Any:
        return self.ctx.ws

    @property
    def run_id(self) -> str:
        return self.ctx.run_id

    @property
    def budget(self) -> Any:
        return self.ctx.task.budget


def tool_view(result: StepResult) -> dict[str, Any]:
    """What the model sees of a tool's result: outcome and numbers, never record contents."""
    view: dict[str, Any] = {
        "executed": True,
        "outcome": result.outcome,
        "summary": result.summary,
        "metrics": result.metrics,
        "artifacts": sorted(result.artifacts),
    }
    return {**view, **result.headline()}


def plan_of(ctx: ToolContext, name: str) -> dict[str, Any]:
    """What a plan-first call of ``name`` returns: the tool's own plan, or what it would run."""
    tool = ctx.toolbox[name]
    if tool.plan is not None:
        return tool.plan(ctx, name)
    return {
        "tool": name,
        "step": ctx.step,
        "inputs": {k: str(v) for k, v in ctx.inputs.given().items()},
        "will": f"run {name} for step {ctx.step} of run {ctx.run_id}",
    }


def _shown(deps: PersonaDeps, view: dict[str, Any]) -> dict[str, Any]:
    """What the model reads of a tool's answer: keys sorted (as transcripts store it); compact for a
    model bound with the compact prompt (``compact.result_view``)."""
    return compact.result_view(view) if deps.prompt == "compact" else compact.sorted_keys(view)


def _make_tool(grant, step_tool: StepTool) -> Tool:
    name = grant.name
    args_cls = step_tool.args or (PlanFirstArgs if grant.plan_first else RunArgs)

    def call(rc: RunContext[PersonaDeps], args: RunArgs) -> dict[str, Any]:
        deps = rc.deps
        ctx = deps.ctx if step_tool.prepare is None else step_tool.prepare(deps.ctx, args)
        if grant.plan_first and not getattr(args, "execute", False):
            deps.plans[name] = plan_of(ctx, name)
            return _shown(
                deps,
                {"executed": False, "plan": deps.plans[name], "next": f"call {name} again with execute=true to run it"},
            )
        if grant.requires_approval and not rc.tool_call_approved:
            raise ApprovalRequired(
                metadata={"action": name, "step": ctx.step, "persona": deps.card.name, "plan": plan_of(ctx, name)}
            )
        result = step_tool.run(ctx)
        deps.results[name] = result
        return _shown(deps, tool_view(result))

    call.__annotations__ = {"rc": RunContext[PersonaDeps], "args": args_cls, "return": dict[str, Any]}
    call.__name__ = name
    call.__doc__ = grant.description
    return Tool(call, name=name, description=grant.description, takes_ctx=True)


def build_agent(
    card: PersonaCard, model: Any, toolbox, *, instructions: str, capabilities: list, retries: int = 2
) -> Agent:
    """The card's Agent with the card's tools that exist in ``toolbox``: nothing else is ever registered."""
    tools = [_make_tool(g, toolbox[g.name]) for g in card.tools if g.name in toolbox]
    return Agent(
        model,
        name=card.name,
        deps_type=PersonaDeps,
        output_type=OUTPUT_TYPES,
        instructions=instructions,
        tools=tools,
        capabilities=capabilities,
        retries=retries,
    )


# ------------------------------------------------------------------- one step


def _error(summary: str, **details: Any) -> StepResult:
    return StepResult(outcome="error", summary=summary, details=details)


def _facts(ctx: ToolContext, card: PersonaCard, tool: str) -> StepFacts:
    grant = card.grant(tool)
    facts = StepFacts(
        persona=card.name, step=ctx.step, visit=ctx.visit, tool=tool, plan_first=bool(grant and grant.plan_first)
    )
    known = ctx.toolbox[tool].facts
    gate = known(ctx) if known is not None else None  # the judge re-derives the gate from the metric
    if gate is not None:
        facts.gate_metric, facts.gate_min, facts.measured = gate.metric, gate.min, gate.measured
    return facts


class _Session:
    """One agent run of one step (possibly resumed): builds, runs, records, maps the result."""

    def __init__(
        self, ctx: ToolContext, tool: str, segment: str | None = None, model: Any = None, prompt: str | None = None
    ):
        self.ctx, self.tool = ctx, tool
        self.card = load_card(ctx.persona)
        ensure_step_node(ctx)  # the engine makes it; a persona run outside the engine needs it too
        self.segment = segment or transcripts.choose_segment(ctx.ws, ctx.run_id, ctx.step, ctx.visit, ctx.execution)
        self.choice, bound_id, style = None, None, "full"
        if model is not None:
            self.model, self.model_desc = model, f"given:{getattr(model, 'model_name', type(model).__name__)}"
        else:  # settings, the persona's role binding, or the offline policy (agents/bound_models.py)
            chosen = persona_model(ctx.ws, ctx.persona)
            self.choice, bound_id = chosen.choice, chosen.bound.model_id if chosen.bound else None
            style = chosen.bound.prompt if chosen.bound else "full"
            self.model = chosen.model if chosen.model is not None else offline_model(_facts(ctx, self.card, tool))
            self.model_desc = chosen.label
        style = prompt or style
        # a model bound with --prompt compact reads the compact brief and only the step's tool (agents/compact.py)
        capabilities = [graph_hooks()] + ([compact.CompactTools(tool)] if style == "compact" else [])
        self.instructions = (
            compact.instructions(self.card, tool) if style == "compact" else briefing.instructions(ctx, self.card, tool)
        )
        self.allowed = [n for n in self.card.tool_names if n in ctx.toolbox]  # exactly what the Agent registers
        if style == "compact":
            self.allowed = [n for n in self.allowed if n == tool]
        self.deps = PersonaDeps(
            ctx=ctx,
            card=self.card,
            step_tool=tool,
            segment=self.segment,
            model=self.model_desc,
            model_id=bound_id,
            prompt=style,
        )
        self.agent = build_agent(
            self.card, self.model, ctx.toolbox, instructions=self.instructions, capabilities=capabilities
        )
        self.record: dict[str, Any] = {
            "run_id": ctx.run_id,
            "step": ctx.step,
            "visit": ctx.visit,
            "segment": self.segment,
            "execution": ctx.execution,
            "persona": self.card.name,
            "tool": tool,
            "model": self.model_desc,
            "instructions": self.instructions,
            "prompt": briefing.step_prompt(ctx, tool),
            "skills": briefing.loaded_skills(ctx, self.card),
            "tools": self.allowed,
            "prompt_style": style,
            "task": ctx.task.model_dump(mode="json"),
            "inputs": ctx.inputs.given(),
            "decided": ctx.decided.model_dump(mode="json"),
            "approvals": [],
            "outputs": ctx.outputs_json(),  # what earlier steps handed this one (paths, metrics): replay starts from it
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
        unknown = sorted(
            {
                p.tool_name
                for m in messages
                if m.kind == "response"
                for p in m.parts
                if getattr(p, "part_kind", "") == "tool-call"
                and p.tool_name not in self.allowed
                and not p.tool_name.startswith("final_result")
            }
        )
        if unknown:
            summary = (
                f"{self.card.name} called unknown tool {', '.join(repr(u) for u in unknown)} "
                f"(its tools: {allowed}); gave up after retries"
            )
        else:
            summary = f"{self.card.name}: the model misbehaved: {exc.message}"
        path = self._write(messages, "error", t0, error=summary)
        for m in messages:
            for p in getattr(m, "parts", []):
                if getattr(p, "part_kind", "") == "tool-call" and p.tool_name in unknown:
                    log_tool_call(
                        self.deps,
                        p.tool_call_id,
                        p.tool_name,
                        p.args_as_dict(),
                        "unknown_tool",
                        error=f"unknown tool {p.tool_name!r}; allowed: {allowed}",
                    )
        return _error(redact(summary), transcript=str(path), persona=self.card.name)

    def _finish(self, result, t0: float) -> StepResult:
        messages = result.all_messages()
        output = result.output
        if isinstance(output, DeferredToolRequests):
            return self._needs_approval(output, messages, t0)
        report: PersonaReport = output
        tool_result = self.deps.results.get(self.tool)
        persona = {
            "persona": self.card.name,
            "decision": report.decision,
            "summary": report.summary,
            "reasons": report.reasons,
            "model": self.model_desc,
        }
        if tool_result is None:
            step = _error(f"{self.card.name} did not run {self.tool}: {report.summary}", persona=persona)
        else:
            step = tool_result.model_copy(deep=True)
            if (
                self.tool == "gate"
                and step.outcome == "passed"
                and report.decision == "fail"
                and self.ctx.decided.accepted_gate is None
            ):
                step.outcome = "failed"  # a gate fails if the judge or the rule says so; never the reverse
                step.summary = f"gate failed by the judge: {'; '.join(report.reasons)}"
            step = step.with_details(persona=persona)
        path = self._write(messages, "completed" if step.outcome != "error" else "error", t0, result=step)
        step = step.with_details(persona={**persona, "transcript": str(path)})
        # the result goes on to the engine's database and DBOS checkpoints: a model's words are masked there too
        return StepResult.model_validate(redact(step.model_dump(mode="json")))

    def _needs_approval(self, output: DeferredToolRequests, messages, t0: float) -> StepResult:
        calls: list[dict[str, Any]] = [
            {"tool_call_id": c.tool_call_id, "tool_name": c.tool_name, "args": c.args_as_dict()}
            for c in output.approvals
        ]
        path = self._write(messages, "needs_approval", t0, pending_calls=calls)
        pending = redact(
            {
                "version": PENDING_VERSION,
                "persona": self.card.name,
                "tool": self.tool,
                "segment": self.segment,
                "started_at": self.record["started_at"],
                "messages": transcripts.dump_messages(messages),
                "approvals": calls,
                "metadata": {k: v for k, v in output.metadata.items()},
            }
        )
        first = calls[0]
        meta = output.metadata.get(first["tool_call_id"], {})
        proposed = redact(
            {
                "tool": first["tool_name"],
                "args": first["args"],
                "step": self.ctx.step,
                "persona": self.card.name,
                "plan": meta.get("plan"),
            }
        )
        gated = self.ctx.toolbox[first["tool_name"]].evidence if first["tool_name"] in self.ctx.toolbox else None
        evidence = redact({"transcript": str(path), **(gated(self.ctx) if gated is not None else {})})
        needs = NeedsPerson(
            action=first["tool_name"],
            proposed=proposed,
            evidence=evidence,
            requested_by=self.card.name,
            resume=Resume(kind="conversation", pending=pending),
        )
        return StepResult(
            outcome="needs_approval",
            summary=f"{self.card.name} asks a person to approve {first['tool_name']}",
            details={"transcript": str(path)},
            needs=needs,
        )

    def _write(
        self,
        messages,
        status: str,
        t0: float,
        *,
        result: StepResult | None = None,
        error: str | None = None,
        pending_calls: list | None = None,
    ) -> Path:
        rec = {
            **self.record,
            "status": status,
            "messages": transcripts.dump_messages(list(messages)),
            "seconds": round(time.monotonic() - t0, 3) + self.record.get("seconds_before", 0.0),
        }
        if result is not None:
            rec["result"] = result.model_dump(mode="json")
            rec["artifact_hashes"] = artifact_hashes(result.artifacts, self.ctx.ws.root)
        if error:
            rec["error"] = error
        if pending_calls is not None:
            rec["pending"] = pending_calls
        return transcripts.write(self.ctx.ws, rec)


def run_persona_step(ctx: ToolContext, tool_name: str, *, model: Any = None, prompt: str | None = None) -> StepResult:
    """Run ``tool_name`` for this step as ``ctx.persona`` (model: settings, or the offline policy).

    ``model`` overrides the settings (tests, replay), ``prompt`` the binding's prompt style (full or
    compact). A tool outside the persona's card is refused before any model is asked.
    """
    card = load_card(ctx.persona)
    if card.grant(tool_name) is None or tool_name not in ctx.toolbox:
        allowed = ", ".join(n for n in card.tool_names if n in ctx.toolbox)
        why = "is not a known tool" if tool_name not in ctx.toolbox else f"is not one of {ctx.persona}'s tools"
        return _error(f"{tool_name!r} {why} (its tools: {allowed})", persona=ctx.persona)
    session = _Session(ctx, tool_name, model=model, prompt=prompt)
    return session.run(user_prompt=session.record["prompt"])


def resume_persona_step(
    ctx: ToolContext, tool_name: str, pending: dict, approved: bool, note: str | None, *, model: Any = None
) -> StepResult:
    """Continue the conversation in ``pending`` with a person's decision on its gated call(s)."""
    if not isinstance(pending, dict) or pending.get("version") != PENDING_VERSION or "messages" not in pending:
        raise BadInput("pending: not a pending persona run (expected needs.resume.pending of needs_approval)")
    if pending.get("persona") != ctx.persona or pending.get("tool") != tool_name:
        raise BadInput(
            f"pending: belongs to {pending.get('persona')}/{pending.get('tool')}, not {ctx.persona}/{tool_name}"
        )
    session = _Session(ctx, tool_name, segment=pending.get("segment"), model=model)
    session.record["started_at"] = pending.get("started_at", session.record["started_at"])
    results = DeferredToolResults()
    for call in pending["approvals"]:
        results.approvals[call["tool_call_id"]] = (
            ToolApproved()
            if approved
            else ToolDenied(f"a person rejected {call['tool_name']}" + (f": {note}" if note else ""))
        )
        session.record["approvals"].append(
            {**call, "approved": approved, "note": note, "decided_at": transcripts.utcnow()}
        )
    return session.run(message_history=transcripts.load_messages(pending["messages"]), deferred_tool_results=results)
