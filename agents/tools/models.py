"""ml_orchestrator's tool: register the model that passed its gates."""

from __future__ import annotations

from trainteam.agents.tools.base import StepResult, ToolContext
from trainteam.graph import EdgeKind, NodeKind


def register_model(ctx: ToolContext) -> StepResult:
    gate_out = ctx.output(ctx.inputs.get("of", "gate"))
    ckpt_node = gate_out["nodes"]["checkpoint"]
    key = f"{ctx.task.name}-{ckpt_node.split(':', 1)[1][:12]}"
    node = ctx.graph.link(NodeKind.MODEL, key, [(EdgeKind.REGISTERS, ckpt_node), (EdgeKind.PRODUCED_BY, ctx.step_node)],
                          name=ctx.task.name, path=gate_out["artifacts"]["checkpoint"], run_id=ctx.run_id)
    return StepResult(summary=f"registered model {key}", nodes={"model": node},
                      artifacts={"model": gate_out["artifacts"]["checkpoint"]}, details={"model_id": key})
