"""The walk from `trainteam execute-workflow` to the line that builds ``SFTTrainer(`` crosses few files.

A newcomer follows one run: cli -> command -> runner -> engine -> persona runtime -> step -> trainer ->
method. ``_walk_probe.py`` runs the real CLI (in a subprocess, a fresh TRAINTEAM_HOME, ``-q``) on a tiny
pretrain+sft task, records the project frames of the three call stacks the walk passes through (the CLI
starting the workflow, the workflow thread entering pydantic-ai, the persona's tool thread constructing
``trl.SFTTrainer``), prints them as JSON and leaves at once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

PROBE = Path(__file__).with_name("_walk_probe.py")
MAX_FILES = 8
TASK = {
    "name": "walk",
    "workflow": "train_model",
    "model": {"arch": "llama", "hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 32},
    "data": {"demo": "addition", "n_train": 64, "n_eval": 8},
    "tokenizer": {"vocab_size": 300, "split_digits": True},
    "stages": ["pretrain", "sft"],
    "training": {"pretrain": {"max_steps": 2, "per_device_batch_size": 4, "seq_len": 32},
                 "sft": {"max_steps": 2, "per_device_batch_size": 4, "seq_len": 32}},
    "gates": {},
    "budget": {"max_wall_minutes": 20},
}


def walk(tmp_path: Path) -> dict:
    task = tmp_path / "task.yaml"
    task.write_text(yaml.safe_dump(TASK))
    env = {**os.environ, "TRAINTEAM_HOME": str(tmp_path / "ws"), "OMP_NUM_THREADS": "1", "TRAINTEAM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(PROBE), str(task)], capture_output=True, text=True, timeout=600,
                          env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("WALK ")]
    if proc.returncode != 0 or not lines:
        pytest.fail(f"the probe exited {proc.returncode} before SFTTrainer was built:\n{proc.stdout[-2000:]}\n"
                    f"{proc.stderr[-3000:]}", pytrace=False)
    return json.loads(lines[-1][len("WALK "):])


def test_walk_to_sft_trainer_crosses_few_files(tmp_path):
    found = walk(tmp_path)
    stacks, files = found["stacks"], found["files"]
    for tag in ("cli", "agent", "sft"):
        print(f"{tag}:\n    " + "\n    ".join(stacks.get(tag, [])))
    print(f"FILES {len(files)}:\n    " + "\n    ".join(files))
    # The probe saw the whole walk: the command, the persona's model call, the line that builds the trainer.
    assert stacks.get("cli") and stacks["cli"][0].startswith("trainteam/cli.py:"), stacks
    assert stacks.get("agent"), "the workflow thread never entered pydantic_ai.Agent.run_sync"
    assert stacks.get("sft") and stacks["sft"][-1].startswith("trainers/training/methods.py:"), stacks
    if len(files) > MAX_FILES:
        pytest.fail(f"the walk from the command line to SFTTrainer( crosses {len(files)} project files "
                    f"(at most {MAX_FILES}):\n  " + "\n  ".join(files), pytrace=False)
