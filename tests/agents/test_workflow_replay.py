"""The team end to end through the workflow engine, then replayed bit for bit on the thread count
the run recorded (even where the environment would pick another)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import yaml
from persona_helpers import cli

TASK = {
    "name": "team",
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64},
    "data": {"demo": "addition", "n_train": 400, "n_eval": 16, "max_operand": 20},
    "tokenizer": {"vocab_size": 280},
    "stages": ["pretrain"],
    "training": {"pretrain": {"max_steps": 6, "per_device_batch_size": 8, "seq_len": 32, "save_steps": 3}},
    "gates": {"pretrain": {"metric": "heldout_loss", "max": 50.0}},
    "budget": {"max_wall_minutes": 30},
}


def test_team_runs_the_workflow_waits_for_registration_and_replays_identically(tmp_path):
    ws = tmp_path / "ws"
    task_file = tmp_path / "task.yaml"
    task_file.write_text(yaml.safe_dump(TASK))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainteam.cli",
            "-w",
            str(ws),
            "execute-workflow",
            "train_model",
            "--task",
            str(task_file),
            "--run-id",
            "team-1",
            "--quiet",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TRAINTEAM_THREADS": "1"},
    )
    try:
        deadline = time.monotonic() + 240
        pending = []
        while not pending and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(2)
            listed = cli(ws, "approvals", "list", "--json")
            pending = json.loads(listed.stdout) if listed.returncode == 0 else []
        assert pending, (
            f"no approval requested; run ended with {proc.poll()}: {proc.stderr.read() if proc.poll() else ''}"
        )
        assert pending[0]["action"] == "register_model" and pending[0]["requested_by"] == "ml_orchestrator"
        assert cli(ws, "approvals", "approve", pending[0]["id"], "--by", "tester").returncode == 0
        assert proc.wait(timeout=600) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
    shown = cli(ws, "replay", "team-1")
    assert "train#1 training_engineer" in shown.stdout and "register_model approved by a person" in shown.stdout
    replay = cli(
        ws,
        "replay",
        "team-1",
        "--execute",
        "--into",
        str(tmp_path / "again"),
        "--json",
        timeout=600,
        env={"TRAINTEAM_THREADS": "2"},
    )
    assert replay.returncode == 0, replay.stdout + replay.stderr
    report = json.loads(replay.stdout)
    assert report["identical"] and len(report["steps"]) >= 8
    from trainteam.agents import transcripts
    from trainteam.workspace import Workspace

    (train,) = [r for r in transcripts.read_run(Workspace.open(tmp_path / "again"), "team-1") if r["step"] == "train"]
    assert train["task"]["threads"] == 1 and train["result"]["metrics"]["pretrain.threads"] == 1
