"""Workflow spec compilation and the knowledge graph, in-process."""

from __future__ import annotations

import pytest

from trainteam.core.errors import BadInput
from trainteam.graph import EdgeKind, NodeKind
from trainteam.workflows.engine.spec import load_builtin, parse_spec
from trainteam.workspace import Workspace


def _spec(edges, gate=False):
    return {"name": "w", "start": "a", "steps": [
        {"name": "a", "persona": "data_curator", "tool": "prepare_corpus"},
        {"name": "b", "persona": "eval_judge", "tool": "gate", "gate": gate},
        {"name": "c", "persona": "ml_orchestrator", "tool": "register_model"}], "edges": edges}


def test_train_model_spec_compiles_with_one_bounded_loop():
    spec = load_builtin("train_model")
    g = spec.graph()
    assert list(g.successors("gate")) == ["align", "train"]
    assert spec.next_step("gate", "passed", {}) == ("align", None)
    assert spec.next_step("gate", "failed", {}) == ("train", "gate->train")
    assert spec.next_step("gate", "failed", {"gate->train": 1}) == (None, None)  # loop limit reached
    assert spec.next_step("gate_align", "skipped", {}) == ("merge_adapters", None)
    assert "gate -.->|failed (max 1x)| train" in spec.mermaid()
    assert spec.next_step("align", "skipped", {}) == ("merge_adapters", None)  # no headroom: nothing to measure
    assert spec.describe_steps(["sft"])[:4] == ["prepare_corpus (data_curator)", "curate (data_curator)",
                                               "precheck_data (data_curator)", "train (training_engineer)"]


@pytest.mark.parametrize("edges, message", [
    ([{"from": "a", "to": "x"}], "edges[0].to: unknown step 'x'"),
    ([{"from": "a", "to": "b"}, {"from": "b", "to": "a", "max_loops": 1}], "only edges leaving a gate step may loop"),
    ([{"from": "a", "to": "b"}], "unreachable from start: ['c']"),
])
def test_bad_specs_name_the_field(edges, message):
    with pytest.raises(BadInput, match="spec.yaml: .*" + message.replace("[", r"\[").replace("]", r"\]")):
        parse_spec(_spec(edges), "spec.yaml")


def test_a_steps_inputs_are_typed_once_and_an_unknown_one_is_refused():
    edges = [{"from": "a", "to": "b"}, {"from": "b", "to": "c"}]
    data = _spec(edges)
    data["steps"][1]["inputs"] = {"of": "a", "final": True}
    gate = parse_spec(data, "spec.yaml").steps[1].inputs
    assert (gate.of, gate.final, gate.from_, gate.battery) == ("a", True, None, None)
    assert gate.given() == {"of": "a", "final": True}  # as the spec wrote it (briefings, transcripts)
    data["steps"][1]["inputs"] = {"of": "a", "fnial": True}
    with pytest.raises(BadInput, match=r"spec.yaml: steps.1.inputs.fnial: unknown field"):
        parse_spec(data, "spec.yaml")


def test_gate_loop_is_allowed_with_a_limit():
    spec = parse_spec(_spec([{"from": "a", "to": "b"}, {"from": "b", "to": "c", "when": "passed"},
                             {"from": "b", "to": "a", "when": "failed", "max_loops": 2}], gate=True), "s")
    assert spec.next_step("b", "failed", {"b->a": 1}) == ("a", "b->a")


def test_graph_is_append_only_and_lineage_follows_edges(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    g = ws.graph
    corpus = g.add_node(NodeKind.CORPUS, "c1", source="demo")
    ds = g.link(NodeKind.DATASET_VERSION, "d1", [(EdgeKind.DERIVED_FROM, corpus)], records=10)
    ckpt = g.link(NodeKind.CHECKPOINT, "k1", [(EdgeKind.TRAINED_ON, ds)])
    other = g.add_node(NodeKind.CORPUS, "c2")
    # writing a fact again changes nothing: the first version stands
    assert g.add_node(NodeKind.DATASET_VERSION, "d1", records=999) == ds
    g.add_edge(ds, corpus, EdgeKind.DERIVED_FROM)
    assert g.get_node(ds)["records"] == 10
    assert g.to_networkx().number_of_edges() == 2
    assert set(g.lineage("k1").nodes) == {ckpt, ds, corpus}
    assert other not in g.lineage(ckpt)
    # reopening the workspace keeps everything
    again = Workspace.open(tmp_path / "ws")
    assert len(again.graph.nodes()) == 4


def test_newer_schema_is_refused_without_touching_data(tmp_path):
    from sqlalchemy import update

    from trainteam.core.db import meta_table

    ws = Workspace.open(tmp_path / "ws")
    ws.graph.add_node(NodeKind.CORPUS, "keep")
    with ws.engine.begin() as conn:
        conn.execute(update(meta_table).values(value="99"))
    with pytest.raises(BadInput, match="schema version 99 is newer"):
        Workspace.open(tmp_path / "ws")
    with ws.engine.begin() as conn:
        conn.execute(update(meta_table).values(value="1"))
    assert Workspace.open(tmp_path / "ws").graph.has_node("Corpus:keep")
