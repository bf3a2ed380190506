"""What a person sees before deciding an approval: the evidence, as typed values.

Written once, when an approval opens (the store's ``evidence`` column is JSON, so each model is
stored as ``model_dump(mode="json")``), and read back into the same models by
``approval_evidence_view`` for ``approvals show``, ``--json`` and the web console:

- ``register_model``: the metrics of the weights it registers, every gate's verdict, the
  checkpoint's path and hashes (each ``*.safetensors`` file's sha256, and ``weights_hash``, the
  Checkpoint node's key), and the data lineage from the knowledge graph (``RegisterEvidence``);
- a loss spike (``restart_after_spike*``, ``accept_spiked_*``): what the monitor saw and the loss
  curve around the spike (``SpikeEvidence``);
- a budget overrun (``exceed_budget*``): the spend against the ceiling (``BudgetEvidence``).

Reads the workspace's files and graph only through what it is handed; writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainteam.contract.step_io import StepResult
from trainteam.contract.step_outputs import GateOutput
from trainteam.core.hashing import sha256_file, weights_hash
from trainteam.graph.knowledge import UnknownNode
from trainteam.workflows.engine.approval_ids import approval_public

CURVE_BEFORE = 12  # logged steps shown before a spike
CURVE_AFTER = 3  # and after it


class _Evidence(BaseModel):
    model_config = ConfigDict(extra="ignore")


class GateVerdict(_Evidence):
    """One gate's verdict as its step recorded it."""

    step: str
    stage: str | None = None
    passed: bool
    promoted: bool = Field(description="passed, or a person accepted its failure")
    accepted_by: str | None = None
    reasons: list[str] = Field(default_factory=list)
    checked: list[str] = Field(default_factory=list, description="the metrics its rules checked")


class WeightsFile(_Evidence):
    name: str
    sha256: str
    bytes: int


class CheckpointEvidence(_Evidence):
    path: str
    weights_hash: str = Field(description="sha256 over the files' sha256s (the Checkpoint node's key)")
    files: list[WeightsFile] = Field(default_factory=list, description="each *.safetensors file")
    node: str | None = None


class LineageNode(_Evidence):
    id: str
    kind: str
    path: str | None = None


class LineageEdge(_Evidence):
    src: str
    dst: str
    kind: str


class LineageEvidence(_Evidence):
    """The registered checkpoint's ancestors in the knowledge graph: the data, tokenizer and
    checkpoints it came from, the steps and run that made them."""

    of: str
    nodes: list[LineageNode] = Field(default_factory=list)
    edges: list[LineageEdge] = Field(default_factory=list)

    def of_kind(self, *kinds: str) -> list[LineageNode]:
        return [n for n in self.nodes if n.kind in kinds]


class RegisterEvidence(_Evidence):
    kind: Literal["register_model"] = "register_model"
    stage: str | None = None
    metrics: dict[str, float] = Field(default_factory=dict, description="the measured weights' metrics")
    test_metrics: dict[str, float] = Field(
        default_factory=dict, description="the same weights on the sealed test rows no deciding step read"
    )
    gates: list[GateVerdict] = Field(default_factory=list)
    checkpoint: CheckpointEvidence | None = None
    lineage: LineageEvidence | None = None


class CurvePoint(_Evidence):
    step: int
    loss: float


class SpikeEvidence(_Evidence):
    kind: Literal["loss_spike"] = "loss_spike"
    stage: str | None = None
    spike_step: int | None = None
    metric: str | None = None
    value: float | str | None = None
    window_mean: float | None = None
    window_std: float | None = None
    z: float | None = None
    rule: str | None = None
    curve: list[CurvePoint] = Field(default_factory=list, description="the logged loss around the spike")
    earlier_spikes: int = 0


class BudgetEvidence(_Evidence):
    kind: Literal["budget"] = "budget"
    spent_seconds: float | None = None
    spent_usd: float | None = None
    allowed_minutes: float | None = None
    extra_minutes: float | None = None
    max_wall_minutes: float | None = None
    max_cost_usd: float | None = None
    where: str | None = None
    overrun_s: float | None = None


class ApprovalView(_Evidence):
    """An approval as a person reads it: the queue's row, its short id and its typed evidence."""

    id: str
    short_id: str
    run_id: str
    step: str
    action: str
    status: str
    requested_by: str
    created_at: str
    decided_by: str | None = None
    decided_at: str | None = None
    note: str | None = None
    proposed: dict[str, Any] = Field(default_factory=dict)
    evidence: dict[str, Any] = Field(default_factory=dict, description="as stored")
    registration: RegisterEvidence | None = None
    spike: SpikeEvidence | None = None
    budget: BudgetEvidence | None = None


# ------------------------------------------------------------------ written when an approval opens


def gate_verdicts(outputs: Mapping[str, StepResult]) -> list[GateVerdict]:
    """Every gate step's verdict among a run's step outputs, in the order they ran."""
    found = []
    for step, out in outputs.items():
        gate = GateOutput.of(out)
        if "gate" not in out.nodes or gate.passed is None:
            continue
        found.append(
            GateVerdict(
                step=step,
                stage=out.stage,
                passed=gate.passed,
                promoted=out.outcome == "passed",
                accepted_by=gate.accepted_by,
                reasons=gate.reasons,
                checked=gate.checked,
            )
        )
    return found


def checkpoint_evidence(path: str | Path, node: str | None = None) -> CheckpointEvidence:
    folder = Path(path)
    files = [
        WeightsFile(name=f.name, sha256=sha256_file(f), bytes=f.stat().st_size)
        for f in sorted(folder.glob("*.safetensors"))
    ]
    return CheckpointEvidence(path=str(folder), weights_hash=weights_hash(folder), files=files, node=node)


def lineage_evidence(graph, node: str) -> LineageEvidence | None:
    """The node's ancestors (``KnowledgeGraph.lineage``); None when the node is not recorded."""
    try:
        sub = graph.lineage(node)
    except UnknownNode:
        return None
    nodes = [
        LineageNode(id=n, kind=d.get("kind", "?"), path=d.get("path") if isinstance(d.get("path"), str) else None)
        for n, d in sorted(sub.nodes(data=True), key=lambda x: (x[1].get("kind", ""), x[0]))
    ]
    edges = [LineageEdge(src=u, dst=v, kind=k) for u, v, k in sub.edges(keys=True)]
    return LineageEvidence(of=node, nodes=nodes, edges=edges)


def register_evidence(ws, final: StepResult, outputs: Mapping[str, StepResult]) -> RegisterEvidence:
    """What a person approving ``register_model`` sees: ``final`` is the measured weights' eval output."""
    ckpt = final.artifacts.get("checkpoint")
    node = final.nodes.get("checkpoint")
    return RegisterEvidence(
        stage=final.stage,
        metrics=dict(final.metrics),
        test_metrics=dict(sealed.metrics) if (sealed := outputs.get("sealed_test")) and sealed.outcome == "ok" else {},
        gates=gate_verdicts(outputs),
        checkpoint=checkpoint_evidence(ckpt, node) if ckpt else None,
        lineage=lineage_evidence(ws.graph, node) if node else None,
    )


def spike_curve(losses: Mapping[str, list], stage: str | None, step: int | None) -> list[CurvePoint]:
    """The logged loss of ``stage`` from ``CURVE_BEFORE`` points before ``step`` to ``CURVE_AFTER`` after."""
    points = [
        CurvePoint(step=int(s), loss=float(v))
        for s, v in (losses.get(stage or "", []) or [])
        if isinstance(v, (int, float))
    ]
    if step is None:
        return points[-(CURVE_BEFORE + CURVE_AFTER) :]
    before = [p for p in points if p.step <= step][-(CURVE_BEFORE + 1) :]
    after = [p for p in points if p.step > step][:CURVE_AFTER]
    return before + after


def with_spike_curve(evidence: dict[str, Any], proposed: Mapping[str, Any], losses: Mapping[str, list]) -> dict:
    """A spike approval's evidence with the curve around the spike (``losses``: the step's carried curves)."""
    stage = proposed.get("stage")
    step = proposed.get("spike_step")
    curve = spike_curve(losses, stage, step if isinstance(step, int) else None)
    return {**evidence, "curve": [p.model_dump(mode="json") for p in curve]}


# ------------------------------------------------------------------ read back


def _spike(evidence: Mapping[str, Any], proposed: Mapping[str, Any]) -> SpikeEvidence:
    monitor = evidence.get("monitor") or {}
    step = proposed.get("spike_step", monitor.get("step"))
    return SpikeEvidence(
        stage=proposed.get("stage"),
        spike_step=step,
        metric=monitor.get("metric"),
        value=monitor.get("value"),
        window_mean=monitor.get("window_mean"),
        window_std=monitor.get("window_std"),
        z=monitor.get("z"),
        rule=monitor.get("rule"),
        curve=evidence.get("curve") or [],
        earlier_spikes=max(0, len(evidence.get("spikes") or []) - 1),
    )


def _budget(evidence: Mapping[str, Any], proposed: Mapping[str, Any]) -> BudgetEvidence:
    spent = evidence.get("spent") or {}
    budget = evidence.get("budget") or {}
    seconds = spent.get("seconds")
    if seconds is None and isinstance(evidence.get("overrun_s"), (int, float)) and evidence.get("allowed_minutes"):
        seconds = evidence["allowed_minutes"] * 60 + evidence["overrun_s"]  # stopped inside training: at the ceiling
    return BudgetEvidence(
        spent_seconds=seconds,
        spent_usd=spent.get("cost_usd"),
        allowed_minutes=evidence.get("allowed_minutes"),
        extra_minutes=proposed.get("extra_minutes"),
        max_wall_minutes=budget.get("max_wall_minutes"),
        max_cost_usd=budget.get("max_cost_usd"),
        where=evidence.get("where"),
        overrun_s=evidence.get("overrun_s"),
    )


def approval_evidence_view(row: Mapping[str, Any]) -> ApprovalView:
    """An approval row (either store's, or ``approval_public``'s dict) as a person reads it."""
    public = approval_public(dict(row))
    evidence, proposed, action = public["evidence"] or {}, public["proposed"] or {}, public["action"]
    view = ApprovalView(**public)
    if isinstance(evidence.get("register_model"), dict):
        view.registration = RegisterEvidence.model_validate(evidence["register_model"])
    if action.startswith(("restart_after_spike", "accept_spiked_")) or "monitor" in evidence:
        view.spike = _spike(evidence, proposed)
    if action.startswith("exceed_budget"):
        view.budget = _budget(evidence, proposed)
    return view
