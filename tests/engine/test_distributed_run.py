"""A task's ``distributed:`` block through the real CLI: checked at validate time (one line naming
the field, exit 2), and a DDP run of 2 gloo processes launched by the train step through
``accelerate launch``, with one rank SIGKILLed mid-training: the attempt fails, the other rank is
stopped, and the next launch resumes from the newest complete checkpoint to the end of the run; the
supervisor names the killed rank, not the one that died of losing it. A workflow process stopped
with SIGTERM (a person cancels, a worker stops) leaves no launcher and no rank behind."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest
from spine_helpers import TINY_TASK, cli, spawn, wait_for, write_task

from trainteam.contract.train_task import parse_task
from trainteam.core.errors import BadInput
from trainteam.workflows.task.preflight import preflight

DDP = {"strategy": "ddp", "num_processes": 2}
TRAINING = {
    "pretrain": {
        "max_steps": 300,
        "learning_rate": 1e-3,
        "per_device_batch_size": 8,
        "seq_len": 32,
        "save_steps": 20,
        "spike": {"enabled": False},
    }
}


def _refusal(tmp_path: Path, **changes) -> str:
    with pytest.raises(BadInput) as err:
        task = parse_task({**TINY_TASK, **changes}, "task.yaml", tmp_path)
        preflight(task, "task.yaml")
    return str(err.value)


def test_bad_distributed_blocks_are_refused_naming_the_field(tmp_path):
    bad = write_task(
        tmp_path, distributed={"strategy": "ddp", "num_processes": 3, "num_machines": 2, "main_process_ip": "10.0.0.1"}
    )
    proc = cli(tmp_path / "ws", "validate", str(bad), "--no-measure")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert "distributed: num_processes: 3 processes do not split evenly over 2 machines" in proc.stderr
    assert not (tmp_path / "ws").exists()
    assert "distributed.num_processes" in _refusal(tmp_path, distributed={"strategy": "ddp", "num_processes": 1})
    assert "distributed.strategy" in _refusal(tmp_path, distributed={"strategy": "horovod", "num_processes": 2})
    assert "main_process_ip: required" in _refusal(tmp_path, distributed={**DDP, "num_machines": 2})
    assert "launcher: torchrun carries no fsdp" in _refusal(
        tmp_path, distributed={"strategy": "fsdp", "num_processes": 2, "launcher": "torchrun"}
    )
    # FSDP and DeepSpeed are generated and validated, but cannot train on a CPU: said at validate time
    assert "falls back to DDP on a CPU" in _refusal(tmp_path, distributed={"strategy": "fsdp", "num_processes": 2})
    assert "DeepSpeed ZeRO needs CUDA" in _refusal(tmp_path, distributed={"strategy": "deepspeed", "num_processes": 2})
    # the stage's own strategy: only through the block, and never against it
    assert "training.pretrain.strategy: ddp over 2 processes is launched by the task's distributed block" in _refusal(
        tmp_path, training={"pretrain": {"max_steps": 4, "strategy": "ddp", "devices_per_node": 2}}
    )
    assert "training.pretrain.devices_per_node: the task's distributed block sets it (2)" in _refusal(
        tmp_path, distributed=DDP, training={"pretrain": {"max_steps": 4, "devices_per_node": 4}}
    )
    good = write_task(tmp_path, "good.yaml", distributed=DDP)
    shown = cli(tmp_path / "ws", "validate", str(good), "--no-measure", check=True).stdout
    assert "✓ distributed: ddp over 2 processes on this machine, started by accelerate" in shown
    ok = parse_task({**TINY_TASK, "distributed": DDP}, "task.yaml", tmp_path)
    assert ok.train_config("pretrain").model_dump(include={"strategy", "devices_per_node", "num_nodes"}) == {
        "strategy": "ddp",
        "devices_per_node": 2,
        "num_nodes": 1,
    }


def _stage_dir(ws: Path) -> Path:
    found = wait_for(lambda: list(ws.glob("checkpoints/*/pretrain-v1")), timeout=600, what="the stage folder")
    return found[0]


def test_ddp_run_loses_a_rank_and_resumes_to_completion(tmp_path, background):
    ws = tmp_path / "ws"
    task = write_task(tmp_path, distributed=DDP, training=TRAINING)
    proc = spawn(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "ddp1", "--json", "--yes")
    background.append(proc)
    stage = _stage_dir(ws)
    ranks = stage / "launch" / "ranks"
    # mid-training: a complete checkpoint exists, the final weights do not; then rank 1 is SIGKILLed
    wait_for(
        lambda: (
            any(stage.glob("checkpoint-*/trainteam-manifest.json"))
            and not (stage / "final").exists()
            and (ranks / "rank1.pid").is_file()
        ),
        timeout=600,
        interval=0.02,
        what="a checkpoint of the launched run",
    )
    killed = int((ranks / "rank1.pid").read_text())
    other = int((ranks / "rank0.pid").read_text())
    os.kill(killed, signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    result = json.loads(out)
    assert result["status"] == "completed", result

    attempts = [json.loads(line) for line in (stage / "launch" / "attempts.jsonl").read_text().splitlines()]
    first, second = attempts
    # the attempt failed naming the SIGKILLed rank, not rank 0 that died of (or was stopped for) its lost peer
    assert not first["ok"] and first["dead_rank"] == 1 and first["pids"]["1"] == killed, first
    assert first["why"].startswith(f"rank 1 (pid {killed}) died before it finished"), first["why"]
    lost = {e["rank"]: e for e in first["lost_ranks"]}
    assert lost[1]["error"] is None and not lost[1]["stopped"]  # it raised nothing: a signal ended it
    assert lost[1]["launcher_exit"] in (None, -9) and ("SIGKILL" in first["why"]) == (lost[1]["launcher_exit"] == -9)
    assert second["ok"] and second["launcher_exit"] == 0
    for pid in (killed, other):  # the killed rank and the one stopped with it: gone, not zombies
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
        assert not psutil.pid_exists(pid)

    records = [json.loads((ranks / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert [r["world_size"] for r in records] == [2, 2] and {r["backend"] for r in records} == {"gloo"}
    assert records[0]["pid"] != records[1]["pid"] and records[0]["steps"] == 300
    # the second launch resumed from a checkpoint, and rank 0's history is the stage's telemetry
    history = [json.loads(line) for line in (stage / "run-history.jsonl").read_text().splitlines()]
    starts = [h for h in history if h.get("event") == "start"]
    assert len(starts) == 2 and starts[0]["resume_from"] is None
    assert Path(starts[1]["resume_from"]).name.startswith("checkpoint-")
    assert (stage / "final" / "model.safetensors").is_file()
    view = json.loads(cli(ws, "runs", "show", "ddp1", "--json", check=True).stdout)
    train = next(s for s in view["steps"] if s["name"] == "train")
    assert train["status"] == "completed"
    assert view["metrics"]["train.pretrain.steps"] == 300.0
    assert view["metrics"]["train.pretrain.steps_this_attempt"] < 300  # resumed, not trained again from 0
    assert view["metrics"]["train.pretrain.interruptions"] == 1.0  # rank 0's telemetry counts the lost attempt


def test_a_sigterm_to_the_workflow_process_stops_and_reaps_the_launch(tmp_path, background):
    ws = tmp_path / "ws"
    long = {"pretrain": {**TRAINING["pretrain"], "max_steps": 20000, "save_steps": 5000}}  # still training when stopped
    task = write_task(tmp_path, distributed=DDP, training=long)
    proc = spawn(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "ddp2", "--json", "--yes")
    background.append(proc)
    stage = _stage_dir(ws)
    ranks = stage / "launch" / "ranks"
    # training under way in both ranks (rank 0 logged a step), then the workflow process is told to stop
    wait_for(
        lambda: (
            (ranks / "rank1.pid").is_file()
            and (stage / "run-history.jsonl").is_file()
            and '"step"' in (stage / "run-history.jsonl").read_text()
        ),
        timeout=600,
        interval=0.05,
        what="the launched ranks training",
    )
    launch = psutil.Process(proc.pid).children(recursive=True)
    rank_pids = [int((ranks / f"rank{r}.pid").read_text()) for r in (0, 1)]
    assert set(rank_pids) <= {p.pid for p in launch}
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=600)
    assert proc.returncode == -signal.SIGTERM

    def gone(pid: int) -> bool:
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE and pid not in rank_pids
        except psutil.NoSuchProcess:
            return True

    # the launcher (told by the kernel as its parent died) stopped the ranks and reaped them
    wait_for(lambda: all(gone(p.pid) for p in launch), timeout=600, interval=0.1, what="the launch stopped")
    for pid in rank_pids:
        assert not psutil.pid_exists(pid)
