"""Telemetry reaches the knowledge graph, linked to the run, data and tokenizer; re-recording is a no-op."""

from __future__ import annotations

from trainteam.graph import NodeKind
from trainteam.trainers import TrainConfig, record_training, train
from trainteam.workspace import Workspace


def test_training_facts_in_the_graph(tmp_path, tiny, tok, arith):
    ws = Workspace.open(tmp_path / "ws")
    g = ws.graph
    data = g.add_node(NodeKind.DATASET_VERSION, "arith-v1")
    tk = g.add_node(NodeKind.TOKENIZER, "tok-v1")
    rep = train("pretrain", TrainConfig(output_dir=tmp_path / "run", max_steps=4, per_device_batch_size=8, seq_len=32),
                tiny, arith[0], tokenizer=tok, progress=False)
    ids = record_training(g, rep, run_key="run-1", trained_on=[data], uses=[tk])
    again = record_training(g, rep, run_key="run-1", trained_on=[data], uses=[tk])
    assert ids == again and len(g.nodes(NodeKind.TELEMETRY)) == 1
    tele = g.get_node(ids["telemetry"])
    assert tele["tokens"] == 4 * 8 * 32 and tele["tokens_per_s"] > 0 and 0 < tele["goodput"] <= 1
    ck = g.get_node(ids["checkpoint"])
    assert ck["step"] == 4 and ck["stopped_reason"] == "completed"
    assert {data, tk} <= set(g.lineage(ids["checkpoint"]).nodes)
