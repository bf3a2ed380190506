"""Every tool call and every decision of a persona goes into the knowledge graph, via pydantic-ai hooks.

The hooks see validated arguments and results as pydantic-ai hands them over, so what
is logged is what ran — not what a persona claims. Everything is redacted first.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel
from pydantic_ai import DeferredToolRequests
from pydantic_ai.capabilities import Hooks

from trainteam.contract.redaction import redact
from trainteam.graph.record import (
    record_decided_by_model,
    record_decision,
    record_run,
    record_step,
    record_tool_call,
)


def _jsonable(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value if isinstance(value, (str, int, float, bool, type(None))) else str(value)


def ensure_step_node(ctx) -> str:
    """The step node the engine creates; made here too when a persona runs outside the engine."""
    g = ctx.graph
    if not g.has_node(ctx.step_node):
        if not g.has_node(ctx.run_node):
            record_run(g, ctx.run_id, task=getattr(ctx.task, "name", None))
        record_step(g, ctx.run_id, ctx.step, ctx.visit, persona=ctx.persona)
    return ctx.step_node


def log_tool_call(
    deps, tool_call_id: str, tool: str, args: Any, status: str, result: Any = None, error: str | None = None
) -> str:
    ctx = deps.ctx
    step = ensure_step_node(ctx)
    attrs: dict[str, Any] = {
        "tool": tool,
        "persona": deps.card.name,
        "run_id": ctx.run_id,
        "step": ctx.step,
        "visit": ctx.visit,
        "tool_call_id": tool_call_id,
        "status": status,
        "args": _jsonable(args),
    }
    if isinstance(result, dict):
        attrs["executed"] = bool(result.get("executed"))
        attrs["outcome"] = result.get("outcome")
        attrs["summary"] = str(result.get("summary") or result.get("next") or "")[:500]
    if error:
        attrs["error"] = error[:500]
    facts = redact(_made_by(deps, attrs))
    return _by_model(
        deps,
        record_tool_call(
            ctx.graph, run_id=ctx.run_id, segment=deps.segment, tool_call_id=tool_call_id, step_node=step, facts=facts
        ),
    )


def _made_by(deps, attrs: dict[str, Any]) -> dict[str, Any]:
    """Who made the call or the decision: ``model`` (a bound model's registered id) on the node."""
    model = getattr(deps, "model", "")
    return {**attrs, "model": model} if model else attrs


def _by_model(deps, node: str) -> str:
    """The node ``decided_by`` the registered model that made it, when the persona runs on one."""
    if getattr(deps, "model_id", None):
        record_decided_by_model(deps.ctx.graph, node, deps.model_id)
    return node


def log_decision(deps, output: Any) -> str:
    ctx = deps.ctx
    step = ensure_step_node(ctx)
    if isinstance(output, DeferredToolRequests):
        attrs = {
            "decision": "needs_person",
            "summary": "waiting for a person's approval",
            "reasons": [f"{c.tool_name} requires approval" for c in output.approvals],
        }
    else:
        attrs = {"decision": output.decision, "summary": output.summary, "reasons": list(output.reasons)}
    attrs.update(persona=deps.card.name, run_id=ctx.run_id, step=ctx.step, visit=ctx.visit)
    return _by_model(
        deps,
        record_decision(
            ctx.graph, run_id=ctx.run_id, segment=deps.segment, step_node=step, facts=redact(_made_by(deps, attrs))
        ),
    )


def graph_hooks() -> Hooks:
    hooks = Hooks()

    @hooks.on.after_tool_execute
    async def _after(ctx, *, call, tool_def, args, result):
        log_tool_call(ctx.deps, call.tool_call_id, call.tool_name, args, "ok", result)
        return result

    @hooks.on.tool_execute_error
    async def _error(ctx, *, call, tool_def, args, error):
        from pydantic_ai import ApprovalRequired

        status = "needs_approval" if isinstance(error, ApprovalRequired) else "error"
        log_tool_call(
            ctx.deps,
            call.tool_call_id,
            call.tool_name,
            args,
            status,
            error=None if status == "needs_approval" else f"{type(error).__name__}: {error}",
        )
        raise error

    @hooks.on.after_run
    async def _decided(ctx, *, result):
        log_decision(ctx.deps, result.output)
        return result

    return hooks
