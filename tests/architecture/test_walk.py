"""The walk from `trainteam execute-workflow` to the line that builds ``SFTTrainer(`` crosses few files, and
following the task's value along it climbs back few times.

A newcomer follows one run: cli -> command -> runner -> engine -> persona runtime -> step -> trainer ->
method. ``_walk_probe.py`` runs the real CLI (in a subprocess, a fresh TRAINTEAM_HOME, ``-q``) on a tiny
pretrain+sft task, records the project frames of the three call stacks the walk passes through (the CLI
starting the workflow, the workflow thread entering pydantic-ai, the persona's tool thread constructing
``trl.SFTTrainer``), prints them as JSON and leaves at once.

**Files**: the project files on those three stacks, each counted once: at most ``MAX_FILES``.

**Following the task value**: the probe also records the stack at each moment the SFT stage's config changes
shape on the way from the task to TRL (``_walk_probe.VALUE_MOMENTS``: the stage resolver ``resolve_stage``
where it exists, the task's stage block read as a ``TrainConfig``, a retry's plan applied, the ``TrainConfig``
turned into TRL's arguments), each ending in the hooked function's own frame.

*The walk* is the sequence of project files a reader passes through, in the order of the stacks (cli, agent,
the value moments in the order they happened, sft), each stack outermost frame first. A stack that shares
its outer frames (same file and function) with the one before continues from the deepest shared frame: the
walk first returns to that frame's file, then goes down the rest. A stack in a new thread shares nothing and
continues from where the walk is. Repeats of one file in a row count once.

*A climb back* is a step of the walk onto a file that is either in a higher room than the file it leaves
(rooms top to bottom as ``test_layering.ROOMS``: shell, workflows, agents, contract, trainers, curation,
graph, core; ``test_layering.room``) or one the walk already left before (a return); a step that is both
counts once. Both kinds are counted: a call up the layers (a persona runtime calling the workflow's tool)
and a return from a helper in another file are each a place the reader must climb back to pick the value up
again. At most ``MAX_CLIMBS``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from test_layering import ROOMS, room

PROBE = Path(__file__).with_name("_walk_probe.py")
MAX_FILES = 8
MAX_CLIMBS = 3
TASK = {
    "name": "walk",
    "workflow": "train_model",
    "model": {"arch": "llama", "hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 32},
    "data": {"demo": "addition", "n_train": 64, "n_eval": 8},
    "tokenizer": {"vocab_size": 300, "split_digits": True},
    "stages": ["pretrain", "sft"],
    "training": {
        "pretrain": {"max_steps": 2, "per_device_batch_size": 4, "seq_len": 32},
        "sft": {"max_steps": 2, "per_device_batch_size": 4, "seq_len": 32},
    },
    "gates": {},
    "budget": {"max_wall_minutes": 20},
}


@dataclass(frozen=True)
class Climb:
    step: int  # index in the walk of the file climbed to
    source: str
    target: str
    why: str  # "higher room", "return" or "higher room, return"

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} ({self.why})"


def file_of(frame: str) -> str:
    return frame.split(":", 1)[0]


def rank(path: str) -> int:
    """0 for the shell, growing downwards (test_layering.ROOMS); 'workflows/steps/train.py' is in workflows."""
    return ROOMS.index(room("trainteam." + path.removesuffix(".py").replace("/", ".").removeprefix("trainteam.")))


def room_of_frame(frame: str) -> str:
    return ROOMS[rank(file_of(frame))]


def walk_files(stacks: list[list[str]]) -> list[str]:
    """The walk through stacks of 'path:line:function' frames (see the module docstring)."""
    walk: list[str] = []
    before: list[tuple[str, str]] = []
    for stack in stacks:
        keys = [(file_of(f), f.rsplit(":", 1)[-1]) for f in stack]
        shared = 0
        while shared < min(len(keys), len(before)) and keys[shared] == before[shared]:
            shared += 1
        for frame in stack[max(shared - 1, 0) :]:
            if not walk or walk[-1] != file_of(frame):
                walk.append(file_of(frame))
        before = keys
    return walk


def climbs(walk: list[str]) -> list[Climb]:
    found = []
    for i in range(1, len(walk)):
        source, target = walk[i - 1], walk[i]
        why = [
            w for w, yes in (("higher room", rank(target) < rank(source)), ("return", target in walk[: i - 1])) if yes
        ]
        if why:
            found.append(Climb(i, source, target, ", ".join(why)))
    return found


def run_probe(tmp_path: Path) -> dict:
    task = tmp_path / "task.yaml"
    task.write_text(yaml.safe_dump(TASK))
    env = {**os.environ, "TRAINTEAM_HOME": str(tmp_path / "ws"), "OMP_NUM_THREADS": "1", "TRAINTEAM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(PROBE), str(task)], capture_output=True, text=True, timeout=600, env=env)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("WALK ")]
    if proc.returncode != 0 or not lines:
        pytest.fail(
            f"the probe exited {proc.returncode} before SFTTrainer was built:\n{proc.stdout[-2000:]}\n"
            f"{proc.stderr[-3000:]}",
            pytrace=False,
        )
    return json.loads(lines[-1][len("WALK ") :])


@pytest.fixture(scope="module")
def found(tmp_path_factory) -> dict:
    return run_probe(tmp_path_factory.mktemp("walk"))


def test_walk_to_sft_trainer_crosses_few_files(found):
    stacks, files = found["stacks"], found["files"]
    for tag in ("cli", "agent", "sft"):
        print(f"{tag}:\n    " + "\n    ".join(stacks.get(tag, [])))
    print(f"FILES {len(files)}:\n    " + "\n    ".join(files))
    # The probe saw the whole walk: the command, the persona's model call, the line that builds the trainer.
    assert stacks.get("cli") and stacks["cli"][0].startswith("trainteam/cli.py:"), stacks
    assert stacks.get("agent"), "the workflow thread never entered pydantic_ai.Agent.run_sync"
    assert stacks.get("sft") and room_of_frame(stacks["sft"][-1]) == "trainers", stacks
    if len(files) > MAX_FILES:
        pytest.fail(
            f"the walk from the command line to SFTTrainer( crosses {len(files)} project files "
            f"(at most {MAX_FILES}):\n  " + "\n  ".join(files),
            pytrace=False,
        )


def test_following_the_task_value_climbs_back_few_times(found):
    stacks, value = found["stacks"], found["value"]
    print("hooked: " + json.dumps(found["hooked"]))
    for moment in value:
        print(f"{moment['tag']}:\n    " + "\n    ".join(moment["stack"]))
    # The value reached TRL's arguments through a hooked function (common_args, or TRL's SFTConfig itself).
    assert any(m["tag"] == "args" for m in value), f"no moment turned the config into TRL's arguments: {found}"
    walk = walk_files([stacks["cli"], stacks["agent"], *(m["stack"] for m in value), stacks["sft"]])
    found_climbs = climbs(walk)
    marks = {c.step: f"   <- climb back: {c.why}" for c in found_climbs}
    print(
        f"WALK {len(walk)} steps, {len(set(walk))} files, {len(found_climbs)} climbs back:\n    "
        + "\n    ".join(f"{path} [{ROOMS[rank(path)]}]{marks.get(i, '')}" for i, path in enumerate(walk))
    )
    if len(found_climbs) > MAX_CLIMBS:
        pytest.fail(
            f"following the task value from the command line to SFTTrainer( climbs back "
            f"{len(found_climbs)} times (at most {MAX_CLIMBS}):\n  "
            + "\n  ".join(map(str, found_climbs))
            + "\nthe walk:\n  "
            + "\n  ".join(walk),
            pytrace=False,
        )


def test_climbs_are_counted_on_a_made_up_walk():
    """The counting itself: a straight descent climbs never; a walk that bounces between rooms and helpers is
    caught, each kind of climb named."""
    straight = [
        ["trainteam/cli.py:1:main", "workflows/engine/durable.py:5:start"],
        ["workflows/engine/durable.py:9:run_workflow", "agents/runtime.py:3:run"],
        ["agents/runtime.py:7:call", "trainers/fit/loop.py:2:train", "curation/rows.py:4:read"],
    ]
    assert walk_files(straight) == [
        "trainteam/cli.py",
        "workflows/engine/durable.py",
        "agents/runtime.py",
        "trainers/fit/loop.py",
        "curation/rows.py",
    ]
    assert climbs(walk_files(straight)) == []

    bouncing = [
        [
            "agents/runtime.py:7:call",
            "workflows/steps/train.py:3:train",  # up the layers: a climb
            "trainteam/contract/train_task.py:9:train_config",
        ],
        [
            "agents/runtime.py:7:call",
            "workflows/steps/train.py:4:train",  # back to train.py: higher room, return
            "workflows/steps/retry.py:1:retry_config",
        ],
        [
            "agents/runtime.py:7:call",
            "workflows/steps/train.py:5:train",  # back to train.py again: return
            "trainers/fit/loop.py:2:train",
            "trainers/training/methods.py:8:build_sft",
            "trainers/training/trainer_args.py:1:common_args",
        ],
        [
            "agents/runtime.py:7:call",
            "workflows/steps/train.py:5:train",  # back to methods.py: return
            "trainers/fit/loop.py:2:train",
            "trainers/training/methods.py:9:build_sft",
        ],
    ]
    walk = walk_files(bouncing)
    assert walk == [
        "agents/runtime.py",
        "workflows/steps/train.py",
        "trainteam/contract/train_task.py",
        "workflows/steps/train.py",
        "workflows/steps/retry.py",
        "workflows/steps/train.py",
        "trainers/fit/loop.py",
        "trainers/training/methods.py",
        "trainers/training/trainer_args.py",
        "trainers/training/methods.py",
    ]
    assert [(c.target, c.why) for c in climbs(walk)] == [
        ("workflows/steps/train.py", "higher room"),
        ("workflows/steps/train.py", "higher room, return"),
        ("workflows/steps/train.py", "return"),
        ("trainers/training/methods.py", "return"),
    ]
    assert len(climbs(walk)) > MAX_CLIMBS  # the real walk's check would fail on this one
