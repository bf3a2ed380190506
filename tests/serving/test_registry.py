"""Model registry: idempotent registration by content, lineage in the graph (recorded by the
registering step's ``register_and_record``), role binding."""

from __future__ import annotations

import shutil

import pytest

from trainteam.core.errors import BadInput, NotFound
from trainteam.graph import EdgeKind, NodeKind
from trainteam.trainers.serving.registry import ModelRegistry
from trainteam.workflows.steps.register import register_and_record
from trainteam.workspace import Workspace


@pytest.fixture()
def ws(tmp_path):
    return Workspace.open(tmp_path / "ws")


def test_registering_the_same_checkpoint_twice_is_a_noop(ws, tiny_checkpoint, tmp_path):
    reg = ModelRegistry.of(ws)
    a = reg.register_checkpoint(tiny_checkpoint, stage="sft", metrics={"exact_match": 0.17}, run_id="r1")
    b = reg.register_checkpoint(tiny_checkpoint, stage="sft", metrics={"exact_match": 0.99})
    copy = shutil.copytree(tiny_checkpoint, tmp_path / "copy")
    c = reg.register_checkpoint(copy, stage="dpo")  # same bytes elsewhere: the same model
    assert a.id == b.id == c.id
    assert (
        b.metrics == {"exact_match": 0.17}
        and b.stage == "sft"
        and b.lineage == {"run_id": "r1", "prompt_format": "plain"}
    )
    assert [m.id for m in reg.list()] == [a.id]
    assert a.prompt_format == "plain"  # its tokenizer has no chat template: bos + prompt, as trained
    assert ws.graph.nodes() == []  # the registry keeps its table; the registering step records the graph


def test_a_registration_cut_short_before_its_graph_node_is_completed_by_the_retry(ws, tiny_checkpoint):
    """kill -9 between the registry row and the Model node: the step's retry finds the row and
    records the lineage it lacks (before, the run failed for good on 'node Model:… does not exist')."""
    from sqlalchemy import text

    first, _ = register_and_record(ws, tiny_checkpoint, stage="sft", run_id="r1")
    with ws.engine.begin() as conn:  # the state the killed process left: the row, no graph node
        conn.execute(text("DELETE FROM graph_edges WHERE src = :n OR dst = :n"), {"n": f"Model:{first.id}"})
        conn.execute(text("DELETE FROM graph_nodes WHERE id = :n"), {"n": f"Model:{first.id}"})
    assert not ws.graph.has_node(f"Model:{first.id}")
    again, node = register_and_record(ws, tiny_checkpoint, stage="sft", run_id="r1")
    assert again.id == first.id and node == f"Model:{first.id}" and ws.graph.has_node(node)
    g = ws.graph.to_networkx()
    assert any(k == EdgeKind.REGISTERS.value for _, _, k in g.out_edges(f"Model:{first.id}", keys=True))


def test_other_weights_are_another_model_with_lineage(ws, tiny_checkpoint, random_checkpoint):
    base, _ = register_and_record(ws, random_checkpoint, stage="pretrain")
    tuned, _ = register_and_record(ws, tiny_checkpoint, stage="sft", base=base.id, metrics={"exact_match": 0.2})
    assert tuned.id != base.id and tuned.base == base.id
    g = ws.graph.to_networkx()
    model_node = f"{NodeKind.MODEL.value}:{tuned.id}"
    out = {(v, k) for _, v, k in g.out_edges(model_node, keys=True)}
    assert (f"{NodeKind.MODEL.value}:{base.id}", EdgeKind.DERIVED_FROM.value) in out
    registered = [v for v, k in out if k == EdgeKind.REGISTERS.value]
    assert len(registered) == 1 and g.nodes[registered[0]]["path"] == str(tiny_checkpoint.resolve())
    assert ws.graph.get_node(model_node)["metrics"] == {"exact_match": 0.2}


def test_role_binding_moves_and_unbinds(ws, tiny_checkpoint, random_checkpoint):
    reg = ModelRegistry.of(ws)
    a = reg.register_checkpoint(tiny_checkpoint, stage="sft", name="adder")
    b = reg.register_checkpoint(random_checkpoint, stage="pretrain")
    with pytest.raises(NotFound, match="no model bound"):
        reg.pick_for_role("eval_judge")
    reg.bind("eval_judge", "adder")  # by name
    assert reg.pick_for_role("eval_judge").id == a.id
    reg.bind("eval_judge", b.id[:6])  # by id prefix: the tag moves, it is never on two models
    assert reg.pick_for_role("eval_judge").id == b.id
    assert reg.get(a.id).roles == [] and reg.get(b.id).roles == ["eval_judge"]
    reg.bind("chat", a.id)
    assert reg.roles() == {"eval_judge": b.id, "chat": a.id}
    assert reg.unbind("eval_judge") == b.id
    assert reg.unbind("eval_judge") is None
    with pytest.raises(NotFound):
        reg.pick_for_role("eval_judge")


def test_bad_inputs_are_named(ws, tmp_path):
    reg = ModelRegistry.of(ws)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "pytorch_model.bin").write_bytes(b"x")
    with pytest.raises(BadInput, match="no \\*.safetensors weights"):
        reg.register_checkpoint(tmp_path / "bin", stage="sft")
    with pytest.raises(BadInput, match="not a folder"):
        reg.register_checkpoint(tmp_path / "missing", stage="sft")
    with pytest.raises(BadInput, match="role"):
        reg.unbind("bad role!")
    with pytest.raises(NotFound, match="not registered"):
        reg.bind("chat", "m-nothing")
