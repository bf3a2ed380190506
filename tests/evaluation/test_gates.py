"""Gates: absolute thresholds, regression against the previous stage, and human acceptance."""

from __future__ import annotations

import pytest

from trainteam.contract.train_task import GateSpec
from trainteam.core.errors import BadInput
from trainteam.graph.record import record_eval, record_gate
from trainteam.trainers.evaluation.gates import GateDecision, GateRule, accept_failed_gate, evaluate_gate


def gate_node(graph, d: GateDecision, *, run_id: str, eval_node: str | None = None) -> str:
    """The steps' call: the decision's plain values into the graph's writer."""
    return record_gate(
        graph,
        run_id=run_id,
        stage=d.stage,
        passed=d.passed,
        promote=d.promote,
        reasons=d.reasons,
        accepted_by=d.accepted_by,
        approval_id=d.approval_id,
        eval_node=eval_node,
    )


def test_absolute_thresholds_pass_and_fail():
    rules = [GateRule(metric="exact_match", min=0.9), GateRule(metric="heldout_loss", max=1.0)]
    ok = evaluate_gate("sft", {"exact_match": 0.95, "heldout_loss": 0.4}, rules)
    assert ok.passed and ok.promote
    bad = evaluate_gate("sft", {"exact_match": 0.85, "heldout_loss": 1.3}, rules)
    assert not bad.passed and not bad.promote
    assert bad.reasons == ["exact_match 0.85 < min 0.9", "heldout_loss 1.3 > max 1"]


def test_missing_metric_fails_with_its_name():
    d = evaluate_gate("sft", {"heldout_loss": 0.4}, GateRule(metric="exact_match", min=0.5))
    assert not d.passed
    assert d.reasons == ["exact_match was not measured in stage sft"]


def test_regression_against_previous_stage():
    rule = GateRule(metric="exact_match", max_regression=0.02)
    within = evaluate_gate("dpo", {"exact_match": 0.94}, rule, previous={"exact_match": 0.95}, previous_stage="sft")
    assert within.passed
    beyond = evaluate_gate("dpo", {"exact_match": 0.90}, rule, previous={"exact_match": 0.95}, previous_stage="sft")
    assert not beyond.passed
    assert "dropped 0.05 against sft" in beyond.reasons[0] and "beyond allowed 0.02" in beyond.reasons[0]
    # Lower-is-better metrics regress upwards.
    loss = evaluate_gate(
        "dpo",
        {"heldout_loss": 0.9},
        GateRule(metric="heldout_loss", max_regression=0.1),
        previous={"heldout_loss": 0.5},
    )
    assert not loss.passed
    # First stage: nothing to regress from.
    assert evaluate_gate("sft", {"exact_match": 0.1}, rule).passed


def test_task_gate_spec_is_accepted():
    spec = GateSpec(metric="exact_match", min=0.95, max_regression=0.01)
    d = evaluate_gate("grpo", {"exact_match": 0.96}, spec, previous={"exact_match": 0.98})
    assert [c.kind for c in d.checks] == ["min", "regression"]
    assert [c.passed for c in d.checks] == [True, False]


def test_only_an_approved_person_decision_accepts_a_failed_gate(tmp_path):
    from trainteam.graph import KnowledgeGraph
    from trainteam.workspace import Workspace

    d = evaluate_gate("sft", {"exact_match": 0.5}, GateRule(metric="exact_match", min=0.9))
    with pytest.raises(BadInput, match="approved decision by a person"):
        accept_failed_gate(d, {"id": "a1", "status": "pending", "decided_by": None})
    with pytest.raises(BadInput):
        accept_failed_gate(d, {"id": "a1", "status": "rejected", "decided_by": "ana"})
    accepted = accept_failed_gate(d, {"id": "a1", "status": "approved", "decided_by": "ana"})
    assert accepted.promote and not accepted.passed and accepted.accepted_by == "ana"
    assert "accepted by ana" in accepted.summary

    ws = Workspace.open(tmp_path / "ws")
    g: KnowledgeGraph = ws.graph
    ckpt = g.add_node("Checkpoint", "c1", path="/x")
    eval_node = record_eval(
        g,
        "r1/sft",
        run_id="r1",
        stage="sft",
        stage_kind="post_train",
        metrics={"exact_match": 0.5},
        n_eval=10,
        checkpoint_node=ckpt,
    )
    first = gate_node(g, d, run_id="r1", eval_node=eval_node)
    second = gate_node(g, accepted, run_id="r1")
    assert g.get_node(first)["passed"] is False and g.get_node(first)["promote"] is False
    node = g.get_node(second)
    assert node["accepted_by"] == "ana" and node["promote"] is True
    # Lineage: gate -> eval -> checkpoint.
    assert {ckpt, eval_node} <= set(g.lineage(first).nodes)
    assert g.get_node(eval_node)["metrics"] == {"exact_match": 0.5}


def test_rule_without_threshold_is_rejected():
    with pytest.raises(BadInput, match=r"gates\[0\]"):
        evaluate_gate("sft", {"exact_match": 1.0}, [{"metric": "exact_match"}])


def test_failed_gate_accepted_through_the_approval_queue_record(tmp_path):
    """The queue's own record (as `read_decision` returns it) is what accepts a failed gate."""
    from trainteam.workflows.engine.approvals import read_decision, request
    from trainteam.workflows.engine.store import ApprovalStore
    from trainteam.workspace import Workspace

    ws = Workspace.open(tmp_path / "ws")
    d = evaluate_gate("sft", {"exact_match": 0.8}, GateRule(metric="exact_match", min=0.9))
    row = request(
        ws,
        run_id="r7",
        step="gate_sft",
        visit=1,
        action="accept_failed_gate",
        proposed={"promote": True},
        evidence=d.model_dump(),
        requested_by="eval_judge",
    )
    with pytest.raises(BadInput):  # still pending: nobody decided
        accept_failed_gate(d, read_decision(ws, row["id"]))
    assert ApprovalStore(ws.engine).decide(row["id"], "approved", "ana", "known flaky eval set")
    accepted = accept_failed_gate(d, read_decision(ws, row["id"]))
    assert accepted.promote and accepted.accepted_by == "ana" and accepted.approval_id == row["id"]
    gate = gate_node(ws.graph, accepted, run_id="r7")
    assert f"Approval:{row['id']}" in ws.graph.lineage(gate).nodes
