"""A training call's facts into the knowledge graph: what was made, from what, and how it ran.

The graph is append-only and idempotent, so a step that re-runs after a crash records
nothing twice. Node keys derive from the run and the step reached, never from time.
"""

from __future__ import annotations

from typing import Iterable

from trainteam.graph import EdgeKind, NodeKind
from trainteam.trainers.results import TrainReport


def record_training(
    graph,
    report: TrainReport,
    *,
    run_key: str,
    trained_on: Iterable[str] = (),
    uses: Iterable[str] = (),
    derived_from: str | None = None,
) -> dict[str, str]:
    """Add the run (if new), its final/spike checkpoint and a telemetry node; return their ids.

    ``trained_on``/``uses``/``derived_from`` are existing node ids (dataset versions,
    tokenizer, the checkpoint training started from).
    """
    run = graph.add_node(NodeKind.RUN, run_key)
    attempt = f"{run_key}/{report.method}/step-{report.steps_done}-{report.stopped_reason}"
    edges = [(EdgeKind.PRODUCED_BY, run)] + [(EdgeKind.TRAINED_ON, d) for d in trained_on] + [(EdgeKind.USES, u) for u in uses]
    if derived_from:
        edges.append((EdgeKind.USES, derived_from))
    ckpt = graph.link(
        NodeKind.CHECKPOINT, attempt, edges,
        path=str(report.final_dir), method=report.method, step=report.steps_done,
        stopped_reason=report.stopped_reason, final_loss=report.losses[-1][1] if report.losses else None,
        resumed_from=str(report.resumed_from) if report.resumed_from else None,
        proposal=report.proposal.model_dump(mode="json") if report.proposal else None,
    )
    tele = graph.link(NodeKind.TELEMETRY, attempt, [(EdgeKind.PRODUCED_BY, run), (EdgeKind.PRODUCED_BY, ckpt)], **report.telemetry)
    return {"run": run, "checkpoint": ckpt, "telemetry": tele}
