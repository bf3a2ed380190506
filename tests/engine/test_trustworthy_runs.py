"""Runs a person can trust (issue 10), through the real CLI on real DBOS and real tiny training:

- the budget holds inside a step: training stops at the ceiling with a checkpoint, a person's
  extension resumes from it, a refusal stops the run;
- a spike restart that cannot change the outcome is never proposed twice, and past the limit a
  person may keep the weights from before the spike;
- the registered model is the model the gates judged, for LoRA SFT + GRPO / DPO and full weights;
- a failed or rejected run ends its DBOS workflow in ERROR, a cancelled one in CANCELLED.

(A killed run shown as interrupted, resumed on its recorded thread count: test_slice.py.)
"""

from __future__ import annotations

import json
import os
import re

import pytest
from spine_helpers import TINY_TASK, cli, pending_approvals, run_view, spawn, wait_for, write_task


def _attempts(ws, run_id: str) -> list[dict]:
    from trainteam.workflows.engine.store import RunStore
    from trainteam.workspace import Workspace

    return RunStore(Workspace.open(ws).engine).attempts(run_id)


def _dbos_status(ws, run_id: str) -> str:
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=f"sqlite:///{ws / 'dbos.sqlite'}")
    try:
        (st,) = client.list_workflows(workflow_ids=[run_id])
        return st.status
    finally:
        client.destroy()


# ------------------------------------------------------------------------------------- budget
def test_the_budget_holds_inside_training_and_a_person_extends_or_stops_it(tmp_path, ws, background):
    # The planner expects this to fit the half minute (it guesses the tiny model's speed high), so the
    # engineer starts it; training itself is what meets the ceiling. On the step clock (core/clock.py) a
    # step counts 0.125 s (exact in binary) and nothing else counts, so the half minute ends at step 240 on any machine.
    training = {"pretrain": {"max_steps": 15000, "per_device_batch_size": 8, "seq_len": 32, "save_steps": 100000}}
    task = write_task(tmp_path, training=training, budget={"max_wall_minutes": 0.5, "extension_minutes": 0.1})
    run = spawn(
        ws,
        "execute-workflow",
        "train_model",
        "--task",
        str(task),
        "--run-id",
        "b1",
        "-q",
        env={"TRAINTEAM_STEP_CLOCK": "0.125"},
    )
    background.append(run)
    (first,) = wait_for(lambda: pending_approvals(ws), timeout=600, what="the exceed_budget approval")
    assert first["step"] == "train" and first["action"] == "exceed_budget_1"
    ev = first["evidence"]
    assert ev["where"] == "training pretrain" and ev["allowed_minutes"] == 0.5
    stopped_at = ev["step"]
    assert stopped_at == 240 and ev["checkpoint"].endswith("checkpoint-240")
    assert os.path.isfile(os.path.join(ev["checkpoint"], "model.safetensors"))  # saved at the ceiling
    assert first["proposed"] == {"continue_with": "train", "extra_minutes": 6 / 60}
    assert run_view(ws, "b1")["status"] == "waiting_approval"

    cli(ws, "approvals", "approve", first["id"], "--by", "dana", check=True)
    second = wait_for(
        lambda: [a for a in pending_approvals(ws) if a["id"] != first["id"]],
        timeout=600,
        what="the second exceed_budget approval",
    )[0]
    assert second["action"] == "exceed_budget_2" and second["evidence"]["allowed_minutes"] == 0.6
    assert second["evidence"]["step"] == 288  # the extension's 6 s (48 steps) trained on from the checkpoint...
    history = [
        json.loads(line)
        for line in (ws / "checkpoints" / "b1" / "pretrain-v1" / "run-history.jsonl").read_text().splitlines()
    ]
    starts = [e for e in history if e["event"] == "start"]
    assert [s["resume_step"] for s in starts] == [0, stopped_at]  # ...not from scratch

    cli(ws, "approvals", "reject", second["id"], "--by", "dana", "--note", "enough", check=True)
    assert run.wait(timeout=600) == 1
    view = run_view(ws, "b1")
    assert view["status"] == "failed"
    assert "budget reached at step" in view["error"] and "more budget rejected by dana: enough" in view["error"]
    assert _dbos_status(ws, "b1") == "ERROR"
    assert [s["name"] for s in view["steps"]][-1] == "train"  # nothing after it ran


# ------------------------------------------------------------------------------------- spikes
def _spiking_sft_task(tmp_path, name: str, save_steps: int, **changes):
    """SFT after pretraining whose monitor watches ``epoch`` (a metric no learning rate changes):
    every attempt spikes at the same step with the same value, as GRPO's flat loss once did."""
    spike = {
        "signals": [{"metric": "epoch"}],
        "window": 4,
        "warmup_steps": 2,
        "sigma": 1.5,
        "rel_floor": 0,
        "abs_floor": 0,
    }
    training = {
        "pretrain": {"max_steps": 4, "per_device_batch_size": 8, "seq_len": 32},
        "sft": {"max_steps": 12, "per_device_batch_size": 8, "seq_len": 32, "save_steps": save_steps, "spike": spike},
    }
    loose = {"metric": "heldout_loss", "max": 50.0}  # 4 pretraining steps move nothing the default gate would pass
    return write_task(
        tmp_path,
        name,
        stages=["pretrain", "sft"],
        training=training,
        gates={"pretrain": loose, "sft": loose},
        **changes,
    )


def test_a_restart_that_reproduces_the_same_spike_is_not_proposed_again(tmp_path, ws):
    task = _spiking_sft_task(tmp_path, "same.yaml", save_steps=100)
    proc = cli(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "s1", "-q", "--yes", timeout=600)
    assert proc.returncode == 1, proc.stderr[-2000:]
    view = run_view(ws, "s1")
    restarts = [a for a in view["approvals"] if a["action"].startswith("restart_after_spike")]
    assert [a["status"] for a in restarts] == ["approved"]  # one restart was proposed, never a second
    assert view["status"] == "failed" and "no restart proposed" in view["error"]
    assert "reproduced the same spike" in view["error"]
    assert _dbos_status(ws, "s1") == "ERROR"
    # the restart ran from the stage's start in its own folder, at half the learning rate
    restart = ws / "checkpoints" / "s1" / "sft-v1-restart1"
    assert restart.is_dir()
    lr = [json.loads(line) for line in (restart / "run-history.jsonl").read_text().splitlines()]
    assert lr[0]["event"] == "start" and lr[0]["resume_step"] == 0


@pytest.mark.parametrize(
    "save_steps, restarts, why",
    [(3, 2, "max_restarts 2"), (100, 1, "reproduced the same spike")],
    ids=["limit-keeps-a-checkpoint", "futile-keeps-the-input-weights"],
)
def test_with_no_restart_left_a_person_may_keep_the_weights_from_before_the_spike(
    tmp_path, ws, background, save_steps, restarts, why
):
    """Checkpoints before the spike: the newest safe one is kept. None (the demo's GRPO case): the
    stage's input weights — here the pretrained model SFT started from."""
    task = _spiking_sft_task(tmp_path, "limit.yaml", save_steps=save_steps, on_gate_failure="ask")
    run = spawn(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "s2", "-q")
    background.append(run)
    decided: list[str] = []
    keep = None
    while keep is None:  # approve every restart the monitor proposes, until it proposes none
        (pending,) = wait_for(
            lambda: [a for a in pending_approvals(ws) if a["id"] not in decided],
            timeout=600,
            what="the next spike approval",
        )
        decided.append(pending["id"])
        if pending["action"].startswith("restart_after_spike"):
            cli(ws, "approvals", "approve", pending["id"], "--by", "dana", check=True)
        else:
            keep = pending
    assert (
        len(decided) - 1 == restarts
    )  # restarts proposed (each at a new step, or one that changed nothing), then none
    assert keep["action"] == "accept_spiked_sft" and keep["step"] == "train"
    assert why in keep["evidence"]["summary"]
    assert [s["stage"] for s in keep["evidence"]["spikes"]] == ["sft"] * (restarts + 1)
    kept = keep["proposed"]["keep"]
    if save_steps < 12:
        assert os.path.basename(kept).startswith("checkpoint-")
        assert int(kept.rsplit("-", 1)[1]) <= keep["proposed"]["spike_step"] - 2  # never one after the spike
    else:
        assert kept == str(ws / "checkpoints" / "s2" / "pretrain-v1" / "final")

    cli(ws, "approvals", "approve", keep["id"], "--by", "dana", "--note", "keep it", check=True)
    (register,) = wait_for(
        lambda: [a for a in pending_approvals(ws) if a["id"] not in decided],
        timeout=600,
        what="the register_model approval",
    )
    assert register["action"] == "register_model"
    cli(ws, "approvals", "approve", register["id"], "--by", "dana", check=True)
    assert run.wait(timeout=600) == 0, run.stderr.read()[-3000:]
    view = run_view(ws, "s2")
    assert view["status"] == "completed"
    from trainteam.workspace import Workspace

    (model,) = Workspace.open(ws).graph.nodes("Model")
    assert _weights_digest(model["path"]) == _weights_digest(kept)  # the registered model is the kept one


# ------------------------------------------------------------------------ registered == gated
def _weights_digest(folder) -> str:
    from trainteam.core.hashing import weights_hash

    return weights_hash(folder)[:16]  # the Checkpoint node key the train step records


LORA = {"r": 4, "alpha": 8}
ALIGN = {
    "grpo": {
        "max_steps": 4,
        "per_device_batch_size": 4,
        "seq_len": 32,
        "learning_rate": 2e-2,
        "grpo": {"num_generations": 4, "max_completion_length": 4, "temperature": 1.0},
    },
    "dpo": {"max_steps": 4, "per_device_batch_size": 4, "seq_len": 32, "learning_rate": 2e-2},
}


@pytest.mark.parametrize(
    "align, lora",
    [("grpo", True), ("dpo", True), ("grpo", False)],
    ids=["lora-sft-grpo", "lora-sft-dpo", "full-sft-grpo"],
)
def test_the_registered_model_is_the_model_the_gates_judged(tmp_path, ws, align, lora):
    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
    from trainteam.trainers import exact_match, heldout_loss, load_tokenizer
    from trainteam.workspace import Workspace

    extra = {"lora": LORA} if lora else {}
    training = {
        "pretrain": {"max_steps": 30, "per_device_batch_size": 8, "seq_len": 32, "learning_rate": 3e-3},
        "sft": {"max_steps": 20, "per_device_batch_size": 8, "seq_len": 32, "learning_rate": 2e-2, **extra},
        align: {**ALIGN[align], **extra},
    }
    task = write_task(
        tmp_path,
        stages=["pretrain", "sft", align],
        training=training,
        gates={"sft": {"metric": "heldout_loss", "max": 50.0}},
    )
    proc = cli(
        ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "m1", "--json", "--yes", timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    view = json.loads(proc.stdout)
    steps = {s["name"]: s["status"] for s in view["steps"]}
    assert steps["gate_final"] == "completed" and steps["register_model"] == "completed"
    m = view["metrics"]
    ws_ = Workspace.open(ws)
    (model,) = ws_.graph.nodes("Model")
    # the Model registers exactly the checkpoint final_eval measured ...
    g = ws_.graph.to_networkx()
    (registered,) = [v for _, v, k in g.out_edges(model["id"], keys=True) if k == "registers"]
    final_out = next(a for a in reversed(_attempts(ws, "m1")) if a["step"] == "final_eval")["output"]
    assert registered == final_out["nodes"]["checkpoint"] == f"Checkpoint:{_weights_digest(model['path'])}"
    # ... and, measured again from the registered folder, scores what final_eval recorded
    data = TINY_TASK["data"]
    _, eval_set = generate_arithmetic(
        ArithmeticConfig(
            task="addition", n_train=data["n_train"], n_eval=data["n_eval"], max_operand=data["max_operand"], seed=0
        )
    )
    tok = load_tokenizer(model["path"])
    assert exact_match(model["path"], tok, eval_set, max_new_tokens=8).accuracy == m["final_eval.exact_match"]
    assert heldout_loss(model["path"], tok, eval_set) == pytest.approx(m["final_eval.heldout_loss"], rel=1e-5)
    # the merge kept the model the align gate judged (a TIES average of the SFT and align adapters did
    # not): each stage moved the model, and the registered weights score what the last gate saw
    print({k: round(v, 5) for k, v in m.items() if k.endswith(("exact_match", "heldout_loss"))})
    assert abs(m["evaluate.heldout_loss"] - m["train.pretrain.heldout_loss"]) > 0.01
    assert abs(m["evaluate_align.heldout_loss"] - m["evaluate.heldout_loss"]) > 1e-3
    assert m["final_eval.heldout_loss"] == pytest.approx(m["evaluate_align.heldout_loss"], rel=1e-5)
    if lora:
        assert (ws / "checkpoints" / "m1" / "merged-v1" / "model.safetensors").is_file()


def test_adapters_of_different_bases_are_never_averaged(tmp_path, ws):
    from trainteam.core.errors import BadInput
    from trainteam.trainers import merge_adapters

    for name, base in (("sft", "/b/one"), ("grpo", "/b/two")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": base}))
    with pytest.raises(BadInput, match="trained on different bases"):
        merge_adapters([tmp_path / "sft", tmp_path / "grpo"], tmp_path / "out")


# ------------------------------------------------------------------------------- statuses
def test_failed_and_rejected_runs_end_in_error_cancelled_in_cancelled_completed_in_success(tmp_path, ws, background):
    failing = write_task(tmp_path, "fail.yaml", gates={"pretrain": {"metric": "exact_match", "min": 1.0}})
    failed = cli(ws, "execute-workflow", "train_model", "--task", str(failing), "--run-id", "f1", "-q", timeout=600)
    assert failed.returncode == 1
    # quiet hides the progress, not why the run stopped: one line on stderr names the run, its status and the gate
    assert re.search(r"run f1: failed — .*exact_match", failed.stderr), failed.stderr[-2000:]
    ok = write_task(tmp_path, "ok.yaml")
    assert (
        cli(
            ws, "execute-workflow", "train_model", "--task", str(ok), "--run-id", "ok1", "-q", "--yes", timeout=600
        ).returncode
        == 0
    )
    rejected = spawn(ws, "execute-workflow", "train_model", "--task", str(ok), "--run-id", "r1", "-q")
    background.append(rejected)
    (pending,) = wait_for(lambda: pending_approvals(ws), timeout=600, what="the register_model approval")
    cli(ws, "approvals", "reject", pending["id"], "--by", "eve", check=True)
    assert rejected.wait(timeout=600) == 1
    waiting = spawn(ws, "execute-workflow", "train_model", "--task", str(ok), "--run-id", "c1", "-q")
    background.append(waiting)
    wait_for(lambda: [a for a in pending_approvals(ws) if a["run_id"] == "c1"], timeout=600, what="c1 waiting")
    cli(ws, "runs", "cancel", "c1", check=True)
    waiting.wait(timeout=600)
    assert {r: _dbos_status(ws, r) for r in ("f1", "ok1", "r1", "c1")} == {
        "f1": "ERROR",
        "ok1": "SUCCESS",
        "r1": "ERROR",
        "c1": "CANCELLED",
    }
    # DBOS's own CLI and queries now tell our runs apart
    import subprocess
    import sys
    from pathlib import Path

    dbos_cli = Path(sys.executable).with_name("dbos")
    listed = subprocess.run(
        [str(dbos_cli), "workflow", "list", "-s", f"sqlite:///{ws / 'dbos.sqlite'}", "-S", "ERROR"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert listed.returncode == 0, listed.stderr[-2000:]
    errors = json.loads(listed.stdout)
    assert sorted(w["workflow_id"] for w in errors) == ["f1", "r1"]
    assert "exact_match 0 < min 1" in next(w["error"] for w in errors if w["workflow_id"] == "f1")
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=f"sqlite:///{ws / 'dbos.sqlite'}")
    try:
        assert [w.workflow_id for w in client.list_workflows(status="CANCELLED")] == ["c1"]
    finally:
        client.destroy()
    assert {r: run_view(ws, r)["status"] for r in ("f1", "ok1", "r1", "c1")} == {
        "f1": "failed",
        "ok1": "completed",
        "r1": "failed",
        "c1": "cancelled",
    }
    shown = cli(ws, "runs", "show", "r1", check=True).stdout
    assert "failed" in shown and "rejected by eve" in shown


def test_an_evaluation_cut_at_the_ceiling_again_asks_for_twice_the_time():
    """An evaluation starts over from its first row after an extension; training resumes from its checkpoint.
    Asking for the same extension each time could loop forever under --yes (seen with a 5-minute budget on a
    busy machine: eight extensions, the evaluation regenerated each time)."""
    from trainteam.contract.step_io import budget_overrun
    from trainteam.contract.train_task import TrainTask
    from trainteam.workflows.engine.durable import _extension

    task = TrainTask.model_validate({**TINY_TASK, "budget": {"max_wall_minutes": 5, "extension_minutes": 1}})
    evaluation = budget_overrun("evaluate", task.budget, 300.0, {"where": "evaluation (exact match)"})
    training = budget_overrun("train", task.budget, 300.0, {"where": "training pretrain"})
    cut: list[str] = []
    assert [_extension(task, evaluation, cut) for _ in range(3)] == [60.0, 120.0, 240.0]
    assert [_extension(task, training, cut) for _ in range(2)] == [60.0, 60.0]  # its steps are kept: no growth
