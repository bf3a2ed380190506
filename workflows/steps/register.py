"""ml_orchestrator's tool: register the model that passed its gates (a person approves first)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.contract.step_io import StepResult, ToolContext
from trainteam.contract.step_outputs import EvalOutput, RegisterOutput, SealedOutput
from trainteam.graph.record import record_model
from trainteam.trainers.serving.registry import ModelRecord, ModelRegistry
from trainteam.workflows.report.evidence import register_evidence


def register_and_record(
    ws,
    path: Path,
    *,
    stage: str,
    metrics: dict[str, Any] | None = None,
    name: str | None = None,
    base: str | None = None,
    run_id: str | None = None,
    checkpoint_node: str | None = None,
    lineage: dict[str, Any] | None = None,
    step_node: str | None = None,
) -> tuple[ModelRecord, str]:
    """The checkpoint in the model registry, and its Model node in the graph (registers the
    Checkpoint ``checkpoint_node``, produced_by the run and ``step_node``): ``(record, node)``.
    A registration whose process died between the registry row and the Model node gets its
    node on the retry."""
    rec = ModelRegistry.of(ws).register_checkpoint(
        path, stage=stage, base=base, metrics=metrics, name=name, run_id=run_id, lineage=lineage
    )
    node = record_model(
        ws.graph,
        rec.id,
        name=rec.name,
        path=rec.path,
        stage=rec.stage,
        base=rec.base,
        metrics=rec.metrics,
        content_hash=rec.content_hash,
        checkpoint_node=checkpoint_node,
        run_id=run_id,
        produced_by=step_node,
    )
    return rec, node


def register_model(ctx: ToolContext) -> StepResult:
    final = ctx.output(ctx.inputs.of or "final_eval")
    ckpt = final.checkpoint
    measured = EvalOutput.of(final)
    sealed = ctx.ran("sealed_test")
    test = sealed.metrics if sealed is not None and sealed.outcome == "ok" else {}
    scored = SealedOutput.of(sealed) if sealed is not None else SealedOutput()
    record, node = register_and_record(
        ctx.ws,
        ckpt,
        stage=final.stage or "",
        metrics={**final.metrics, **{f"test.{k}": v for k, v in test.items()}},
        name=ctx.task.name,
        run_id=ctx.run_id,
        checkpoint_node=final.checkpoint_node,
        lineage={
            "run": ctx.run_id,
            "task": ctx.task.name,
            "stages": ctx.task.stage_names(),
            # the answer length it was judged at: `trainteam serve` answers with it by default
            **({"answer_tokens": measured.answer_tokens} if measured.answer_tokens else {}),
            # the figures to trust: the sealed test part, scored once, that no deciding step read
            **({"sealed_test": {"rows": scored.n_test, "sizing": scored.sizing}} if test else {}),
        },
        step_node=ctx.step_node,
    )
    return StepResult(
        summary=f"registered model {record.id} ({record.stage})",
        nodes={"model": node, "checkpoint": final.checkpoint_node},
        artifacts={"model": str(ckpt)},
        details=RegisterOutput(model_id=record.id).model_dump(mode="json"),
    )


def register_model_evidence(ctx: ToolContext) -> dict[str, Any]:
    """What a person approving the registration sees: the measured metrics, every gate's verdict,
    the checkpoint's path and hashes, its data lineage (``workflows.evidence.RegisterEvidence``)."""
    try:
        final = ctx.output(ctx.inputs.of or "final_eval")
    except LookupError:  # nothing measured to show: the call itself will say so when it runs
        return {}
    return {"register_model": register_evidence(ctx.ws, final, ctx.outputs).model_dump(mode="json")}
