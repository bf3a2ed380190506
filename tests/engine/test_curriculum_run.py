"""`examples/tasks/curriculum.yaml` end to end through the real CLI (real DBOS, real training):
pretrain → mid_train (its own subtraction data) → long_context (seq_len 256) → SFT, each stage
from the previous stage's checkpoint, each measured, the lineage of each checkpoint reaching
its own data, the report showing every stage."""

from __future__ import annotations

import json
from itertools import pairwise
from pathlib import Path

import pytest
import yaml
from spine_helpers import cli

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "tasks" / "curriculum.yaml"
ORDER = ["pretrain", "mid_train", "long_context", "sft"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    ws = tmp_path_factory.mktemp("curriculum") / "ws"
    proc = cli(
        ws, "execute-workflow", "train_model", "--task", str(EXAMPLE), "--run-id", "c1", "--json", "--yes", timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    from trainteam.workspace import Workspace

    return ws, json.loads(proc.stdout), Workspace.open(ws)


def _out(g, node, kind):
    return [v for _, v, k in g.out_edges(node, keys=True) if k == kind]


def test_each_stage_continues_from_the_previous_checkpoint_on_its_own_data(run):
    ws_path, view, ws = run
    task = yaml.safe_load(EXAMPLE.read_text())
    assert view["status"] == "completed"
    m = view["metrics"]
    for st in task["curriculum"]:  # every stage trained its own number of steps
        assert m[f"train.{st['name']}.steps"] == st["training"]["max_steps"]
    g = ws.graph.to_networkx()
    ckpts = {d["stage"]: n for n, d in g.nodes(data=True) if d["kind"] == "Checkpoint" and d.get("run_id") == "c1"}
    assert set(ckpts) == set(ORDER)
    # in order, each from the previous stage's checkpoint ...
    for prev, stage in pairwise(ORDER):
        assert _out(g, ckpts[stage], "derived_from") == [ckpts[prev]]
    assert _out(g, ckpts["pretrain"], "derived_from") == []
    assert (
        g.nodes[ckpts["pretrain"]]["created_at"]
        < g.nodes[ckpts["mid_train"]]["created_at"]
        < g.nodes[ckpts["long_context"]]["created_at"]
        < g.nodes[ckpts["sft"]]["created_at"]
    )
    # ... with its weights: a later stage's first loss is far below a random init's
    loss = json.loads(cli(ws_path, "runs", "report", "c1", "--json", check=True).stdout)
    curves = json.loads(Path(loss["data"]["loss"]).read_text())["stages"]
    assert list(curves) == ORDER
    for stage in ORDER[1:]:
        assert curves[stage]["losses"][0] < 0.7 * curves["pretrain"]["losses"][0]
    # each checkpoint's lineage reaches its own data: mid_train the subtraction corpus, the rest addition
    for stage, node in ckpts.items():
        (data,) = _out(g, node, "trained_on")
        lineage = ws.graph.lineage(data)
        corpora = [
            d["params"]["task"]
            for _, d in lineage.nodes(data=True)
            if d["kind"] == "Corpus" and d.get("source") == "demo"
        ]
        assert corpora == ["subtraction" if stage == "mid_train" else "addition"], (stage, corpora)
        assert node in ws.graph.lineage(ckpts["sft"])  # and the final model's lineage holds every stage
    assert _out(g, ckpts["mid_train"], "trained_on") != _out(g, ckpts["pretrain"], "trained_on")
    assert _out(g, ckpts["long_context"], "trained_on") == _out(g, ckpts["pretrain"], "trained_on")


def test_long_context_trained_on_its_own_seq_len(run):
    _, view, ws = run
    m = view["metrics"]
    lc = next(d for d in ws.graph.nodes("Checkpoint") if d["stage"] == "long_context")
    assert lc["seq_len"] == 256 and m["train.long_context.seq_len"] == 256 and m["train.mid_train.seq_len"] == 64
    # tokens the trainer counted per row: a packed 256-token window (EOS separators aside), not 64
    per_row = m["train.long_context.tokens"] / (m["train.long_context.steps"] * 4)
    assert 0.9 * 256 < per_row <= 256
    per_row_mid = m["train.mid_train.tokens"] / (m["train.mid_train.steps"] * 16)
    assert 0.9 * 64 < per_row_mid <= 64


def test_every_stage_measured_with_its_own_battery_and_gate(run):
    ws_path, view, ws = run
    m = view["metrics"]
    # the earlier stages in the train step, each with its kind's battery; the last by evaluate
    assert {"train.pretrain.heldout_loss", "train.pretrain.exact_match", "train.pretrain.repetition_rate"} <= set(m)
    assert {"train.mid_train.heldout_loss", "train.mid_train.exact_match", "train.mid_train.format_adherence"} <= set(m)
    assert {"train.long_context.heldout_loss", "train.long_context.determinism"} <= set(m)
    assert "train.long_context.exact_match" not in m  # not in the long-context battery
    assert {"evaluate.exact_match", "evaluate.format_adherence", "evaluate.determinism"} <= set(m)
    evals = {d["stage"]: d for d in ws.graph.nodes("Eval") if d["run_id"] == "c1" and "/train#1/" in d["id"]}
    assert list(evals) == ORDER[:3]
    g = ws.graph.to_networkx()
    for stage, ev in evals.items():
        (ckpt,) = _out(g, ev["id"], "evaluates")
        assert g.nodes[ckpt]["stage"] == stage
        assert ev["metrics"]["heldout_loss"] == pytest.approx(m[f"train.{stage}.heldout_loss"])
        assert ev["decontaminated"]
    # mid_train is measured on its own held-out subtraction problems
    (mid_set,) = _out(g, evals["mid_train"]["id"], "evaluated_on")
    (pre_set,) = _out(g, evals["pretrain"]["id"], "evaluated_on")
    assert g.nodes[mid_set]["stage"] == "mid_train" and mid_set != pre_set
    # the mid_train gate was judged in the train step, against the stage before it
    gates = {d["stage"]: d for d in ws.graph.nodes("Gate") if d["run_id"] == "c1"}
    assert gates["mid_train"]["passed"] and "heldout_loss" in gates["mid_train"]["reasons"][0]
    assert _out(g, gates["mid_train"]["id"], "decided_by") == [evals["mid_train"]["id"]]
    assert gates["sft"]["passed"]
    # stage datasets were curated against every eval set of the run
    for stage in ("pretrain", "mid_train"):
        ckpt = next(d for d in ws.graph.nodes("Checkpoint") if d["stage"] == stage)
        (data,) = _out(g, ckpt["id"], "trained_on")
        assert len(_out(g, data, "decontaminated_against")) == 3  # the dev and sealed test parts, the stage's own


def test_the_report_shows_metrics_per_stage(run):
    ws_path, view, _ = run
    files = json.loads(cli(ws_path, "runs", "report", "c1", "--json", check=True).stdout)
    evals = json.loads(Path(files["data"]["evals"]).read_text())
    # what the first stage started from (a random init's reference loss) beside every stage's score
    assert evals["heldout_loss"]["stages"] == ["random init (reference)"] + ORDER + ["final"]
    assert evals["heldout_loss"]["values"][2] == pytest.approx(view["metrics"]["train.mid_train.heldout_loss"])
    assert evals["heldout_loss"]["thresholds"] == {"mid_train": {"max": 4.0}}
    md = Path(files["markdown"]).read_text()
    assert "| long_context | long_context | pretrain | task data | 256 | 20 |" in md
    assert "| mid_train | mid_train | pretrain | demo subtraction (2000 train / 64 held-out) | 64 | 40 |" in md
    assert "| mid_train | exact_match |" in md and "| pretrain | heldout_loss |" in md
    assert "gate **mid_train**: passed" in md


def _strict_task(tmp_path, **changes) -> Path:
    """pretrain → mid_train (a gate no tiny model passes: held-out loss ≤ 0.01) → sft."""
    from spine_helpers import TINY_TASK

    body = {k: v for k, v in TINY_TASK.items() if k not in ("stages", "training", "gates")}
    body["curriculum"] = [
        {
            "name": "pretrain",
            "training": {"max_steps": 4, "per_device_batch_size": 8, "seq_len": 32},
            "gates": [{"metric": "heldout_loss", "max": 50.0}],
        },  # 4 steps move nothing: the default gate would stop here
        {
            "name": "mid_train",
            "data": {"demo": "subtraction", "n_train": 200, "n_eval": 16, "max_operand": 20},
            "training": {"max_steps": 4, "per_device_batch_size": 8, "seq_len": 32},
            "gates": [{"metric": "heldout_loss", "max": 0.01}],
        },
        {
            "name": "sft",
            "training": {"max_steps": 4, "per_device_batch_size": 8, "seq_len": 32},
            "gates": [{"metric": "heldout_loss", "max": 50.0}],
        },
    ]
    task = tmp_path / "strict.yaml"
    task.write_text(yaml.safe_dump({**body, **changes}))
    return task


def test_a_failed_stage_gate_stops_the_run_with_its_reason(tmp_path, ws):
    from spine_helpers import run_view

    task = _strict_task(tmp_path)
    proc = cli(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "g1", "-q", timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    view = run_view(ws, "g1")
    assert view["status"] == "failed"
    assert "gate mid_train: failed: heldout_loss" in view["error"] and "> max 0.01" in view["error"]
    assert "sft not trained" in view["error"]
    assert [s["name"] for s in view["steps"]][-1] == "train"  # nothing after it ran: no evaluate, no model
    assert not (ws / "checkpoints" / "g1" / "sft-v1").exists()
    md = Path(json.loads(cli(ws, "runs", "report", "g1", "--json", check=True).stdout)["markdown"]).read_text()
    assert "gate **mid_train**: FAILED" in md and "| mid_train | heldout_loss |" in md


def test_a_person_accepts_a_failed_stage_gate_and_the_curriculum_goes_on(tmp_path, ws, background):
    from spine_helpers import pending_approvals, run_view, spawn, wait_for

    run = spawn(
        ws,
        "execute-workflow",
        "train_model",
        "--task",
        str(_strict_task(tmp_path, on_gate_failure="ask")),
        "--run-id",
        "a1",
        "-q",
    )
    background.append(run)
    (pending,) = wait_for(lambda: pending_approvals(ws), timeout=600, what="the stage gate's approval")
    assert pending["step"] == "train" and pending["action"] == "accept_failed_gate_mid_train"
    assert pending["proposed"]["stage"] == "mid_train"
    assert any("heldout_loss" in r and "> max 0.01" in r for r in pending["evidence"]["reasons"])
    assert not (ws / "checkpoints" / "a1" / "sft-v1").exists()  # nothing after the stage trains while it waits
    mid_final = ws / "checkpoints" / "a1" / "mid_train-v1" / "final"
    before = {p.name: p.stat().st_mtime_ns for p in mid_final.glob("*.safetensors")}

    cli(ws, "approvals", "approve", pending["id"], "--by", "dana", "--note", "loss bar too strict", check=True)
    (register,) = wait_for(lambda: pending_approvals(ws), timeout=600, what="the register_model approval")
    assert register["step"] == "register_model"  # the run went on: sft, evaluate, gate, final eval
    cli(ws, "approvals", "approve", register["id"], "--by", "dana", check=True)
    assert run.wait(timeout=600) == 0, run.stderr.read()[-3000:]
    view = run_view(ws, "a1")
    assert view["status"] == "completed"
    assert view["metrics"]["train.sft.steps"] == 4  # the stage after the accepted one trained
    # the accepted stage was not trained again: its weights are the ones the person judged
    assert {p.name: p.stat().st_mtime_ns for p in mid_final.glob("*.safetensors")} == before
    from trainteam.workspace import Workspace

    graph = Workspace.open(ws).graph
    (gate,) = [d for d in graph.nodes("Gate") if d["run_id"] == "a1" and d["stage"] == "mid_train" and d["accepted_by"]]
    assert gate["accepted_by"] == "dana" and gate["promote"] and not gate["passed"]
    decided = [v for _, v, k in graph.to_networkx().out_edges(gate["id"], keys=True) if k == "decided_by"]
    assert f"Approval:{pending['id']}" in decided
    md = Path(json.loads(cli(ws, "runs", "report", "a1", "--json", check=True).stdout)["markdown"]).read_text()
    assert "gate **mid_train**: FAILED (accepted by dana)" in md


def test_a_rejected_stage_gate_stops_the_run(tmp_path, ws, background):
    from spine_helpers import pending_approvals, run_view, spawn, wait_for

    run = spawn(
        ws,
        "execute-workflow",
        "train_model",
        "--task",
        str(_strict_task(tmp_path, on_gate_failure="ask")),
        "--run-id",
        "a2",
        "-q",
    )
    background.append(run)
    (pending,) = wait_for(lambda: pending_approvals(ws), timeout=600, what="the stage gate's approval")
    cli(ws, "approvals", "reject", pending["id"], "--by", "eve", "--note", "retrain it", check=True)
    assert run.wait(timeout=600) == 1
    view = run_view(ws, "a2")
    assert view["status"] == "failed"
    assert "gate mid_train: failed" in view["error"] and "rejected by eve: retrain it" in view["error"]
    assert not (ws / "checkpoints" / "a2" / "sft-v1").exists()
