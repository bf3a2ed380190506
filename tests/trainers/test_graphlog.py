"""A training call's facts reach the knowledge graph (graph.record.record_training, from the
TrainReport's values), linked to the run, data and tokenizer; re-recording is a no-op."""

from __future__ import annotations

from trainteam.graph import NodeKind
from trainteam.graph.record import record_training
from trainteam.trainers import TrainConfig, TrainReport, train
from trainteam.workspace import Workspace


def _record(g, rep: TrainReport, **links) -> dict[str, str]:
    return record_training(
        g, run_key="run-1", method=rep.method, steps_done=rep.steps_done, stopped_reason=rep.stopped_reason,
        final_dir=str(rep.final_dir), final_loss=rep.losses[-1][1] if rep.losses else None,
        resumed_from=str(rep.resumed_from) if rep.resumed_from else None,
        proposal=rep.proposal.model_dump(mode="json") if rep.proposal else None, telemetry=rep.telemetry, **links)


def test_training_facts_in_the_graph(tmp_path, tiny, tok, arith):
    ws = Workspace.open(tmp_path / "ws")
    g = ws.graph
    data = g.add_node(NodeKind.DATASET_VERSION, "arith-v1")
    tk = g.add_node(NodeKind.TOKENIZER, "tok-v1")
    rep = train("pretrain", TrainConfig(output_dir=tmp_path / "run", max_steps=4, per_device_batch_size=8, seq_len=32),
                tiny, arith[0], tokenizer=tok, progress=False)
    ids = _record(g, rep, trained_on=[data], uses=[tk])
    again = _record(g, rep, trained_on=[data], uses=[tk])
    assert ids == again and len(g.nodes(NodeKind.TELEMETRY)) == 1
    tele = g.get_node(ids["telemetry"])
    assert tele["tokens"] == 4 * 8 * 32 and tele["tokens_per_s"] > 0 and 0 < tele["goodput"] <= 1
    ck = g.get_node(ids["checkpoint"])
    assert ck["step"] == 4 and ck["stopped_reason"] == "completed"
    assert ck["id"] == "Checkpoint:run-1/pretrain/step-4-completed" and ck["path"] == str(rep.final_dir)
    assert {data, tk} <= set(g.lineage(ids["checkpoint"]).nodes)
