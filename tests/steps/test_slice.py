"""The vertical slice through the real CLI: data → tokenizer → pretrain → eval → gate → model."""

from __future__ import annotations

import json
import os
import signal

from spine_helpers import cli, run_view, spawn, wait_for, write_task


def _dbos_steps(ws, run_id):
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=f"sqlite:///{ws / 'dbos.sqlite'}")
    try:
        return [s["function_name"] for s in client.list_workflow_steps(run_id)]
    finally:
        client.destroy()


def test_slice_end_to_end_with_lineage(tmp_path, ws):
    task = write_task(tmp_path)
    proc = cli(
        ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "r1", "--json", "--yes", timeout=600
    )
    assert proc.returncode == 0, proc.stderr
    view = json.loads(proc.stdout)
    assert view["status"] == "completed"
    # registering the model is gated on the orchestrator's card: the person's --yes decided it
    assert [(a["action"], a["status"]) for a in view["approvals"]] == [("register_model", "approved")]
    assert view["approvals"][0]["decided_by"].endswith("(--yes)")
    assert [(s["name"], s["status"], s["attempts"]) for s in view["steps"]] == [
        ("prepare_corpus", "completed", 1),
        ("curate", "completed", 1),
        ("precheck_data", "completed", 1),
        ("train_tokenizer", "completed", 1),
        ("train", "completed", 1),
        ("evaluate", "completed", 1),
        ("gate", "completed", 1),
        ("align", "skipped", 1),  # a skipped align goes straight to merging (nothing to measure or gate)
        ("merge_adapters", "completed", 1),
        ("final_eval", "completed", 1),
        ("gate_final", "completed", 1),
        ("sealed_test", "completed", 1),
        ("register_model", "completed", 1),
    ]
    assert 0.0 <= view["metrics"]["evaluate.exact_match"] <= 1.0
    assert view["metrics"]["train.pretrain.steps"] == 6

    models = json.loads(cli(ws, "graph", "nodes", "--kind", "Model", "--json", check=True).stdout)
    assert len(models) == 1
    lineage = json.loads(cli(ws, "graph", "lineage", models[0]["id"], "--json", check=True).stdout)
    kinds = {n["kind"] for n in lineage["nodes"]}
    assert {"Run", "Checkpoint", "Tokenizer", "DatasetVersion", "Corpus"} <= kinds
    assert any(n["id"] == "Run:r1" for n in lineage["nodes"])
    ckpt = next(n for n in lineage["nodes"] if n["kind"] == "Checkpoint")
    assert any(p.endswith(".safetensors") for p in os.listdir(ckpt["path"]))

    # the run report: markdown and plots whose data are the recorded values
    files = json.loads(cli(ws, "runs", "report", "r1", "--json", check=True).stdout)
    assert set(files["plots"]) == {"loss", "evals", "steps"}
    assert all(os.path.getsize(p) > 1000 for p in files["plots"].values())
    loss_data = json.loads(open(files["data"]["loss"]).read())
    assert len(loss_data["stages"]["pretrain"]["steps"]) == 6
    evals_data = json.loads(open(files["data"]["evals"]).read())
    assert json.dumps(view["metrics"]["evaluate.exact_match"]) in json.dumps(evals_data)
    assert "r1" in open(files["markdown"]).read()

    out = cli(ws, "graph", "export", "--format", "graphml", "--out", str(tmp_path / "g.graphml"), check=True)
    import networkx as nx

    g = nx.read_graphml(out.stdout.strip())
    assert models[0]["id"] in g and "Run:r1" in g


def test_failed_gate_stops_the_run_with_its_reason(tmp_path, ws):
    task = write_task(tmp_path, gates={"pretrain": {"metric": "exact_match", "min": 1.0}})
    proc = cli(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "r2", "-q", timeout=600)
    assert proc.returncode == 1
    view = run_view(ws, "r2")
    assert view["status"] == "failed"
    assert "exact_match 0 < min 1" in view["error"]
    assert "register_model" not in [s["name"] for s in view["steps"]]


def test_kill_during_training_then_resume_runs_each_finished_step_once(tmp_path, ws):
    training = {"pretrain": {"max_steps": 150, "per_device_batch_size": 8, "seq_len": 32, "save_steps": 5}}
    task = write_task(tmp_path, training=training)
    run = spawn(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "r3", "-q")
    ckpt_dir = ws / "checkpoints" / "r3" / "pretrain-v1"
    wait_for(
        lambda: ckpt_dir.exists() and any(p.name.startswith("checkpoint-") for p in ckpt_dir.iterdir()),
        timeout=600,
        interval=0.2,
        what="a first checkpoint",
    )
    os.kill(run.pid, signal.SIGKILL)
    run.wait(timeout=10)
    before = run_view(ws, "r3")
    assert before["status"] == "interrupted" and before["process_alive"] is False
    listed = json.loads(cli(ws, "runs", "list", "--json", check=True).stdout)
    assert [(r["run_id"], r["status"]) for r in listed] == [("r3", "interrupted")]
    assert before["metrics"]["run.threads"] == 1  # fixed as training started (here: TRAINTEAM_THREADS=1)

    # resumed where the environment would now pick 2 threads: the run keeps the count it recorded
    resumed = cli(ws, "runs", "resume", "r3", "-q", "--yes", timeout=600, env={"TRAINTEAM_THREADS": "2"})
    assert resumed.returncode == 0, resumed.stderr
    view = run_view(ws, "r3")
    assert view["status"] == "completed"
    attempts = {s["name"]: s["attempts"] for s in view["steps"]}
    assert attempts.pop("train") == 2
    assert (
        set(attempts.values()) == {1} and len(attempts) == 12
    )  # precheck_data, sealed_test in; a skipped align goes to merging
    assert view["metrics"]["train.pretrain.steps"] == 150
    assert view["metrics"]["train.pretrain.threads"] == 1
    # DBOS recorded every step exactly once; the graph holds one Step node per step
    # step records only (not approvals, budget checks or a gated call's continuation)
    steps = [s for s in _dbos_steps(ws, "r3") if "#" in s and ":" not in s and "." not in s]
    assert sorted(steps) == sorted(f"{n}#1" for n in [*attempts, "train"])
    nodes = json.loads(cli(ws, "graph", "nodes", "--kind", "Step", "--json", check=True).stdout)
    assert sorted(n["step"] for n in nodes) == sorted([*attempts, "train"])
