"""ml_orchestrator's tool: register the model that passed its gates (a person approves first)."""

from __future__ import annotations

from pathlib import Path

from trainteam.agents.toolbox import StepResult, ToolContext
from trainteam.graph import NodeKind, node_id


def register_model(ctx: ToolContext) -> StepResult:
    from trainteam.trainers.registry import ModelRegistry

    final = ctx.output(ctx.inputs.get("of", "final_eval"))
    ckpt = Path(final["artifacts"]["checkpoint"])
    record = ModelRegistry.of(ctx.ws).register_checkpoint(
        ckpt, stage=final["details"]["stage"], metrics=final["metrics"], name=ctx.task.name, run_id=ctx.run_id,
        checkpoint_node=final["nodes"]["checkpoint"],
        lineage={"run": ctx.run_id, "task": ctx.task.name, "stages": ctx.task.stage_names()},
    )
    ctx.graph.add_edge(node_id(NodeKind.MODEL, record.id), ctx.step_node, "produced_by")
    return StepResult(summary=f"registered model {record.id} ({record.stage})",
                      nodes={"model": node_id(NodeKind.MODEL, record.id), "checkpoint": final["nodes"]["checkpoint"]},
                      artifacts={"model": str(ckpt)}, details={"model_id": record.id})
