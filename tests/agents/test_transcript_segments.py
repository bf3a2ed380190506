"""A step's agent run keeps its transcript segment when its process is killed and the engine runs the same
execution again: the graph then holds one set of its tool calls and decisions, as an uninterrupted run's
(tests/engine/test_durability.py caught a second set once, when a kill landed after the transcript was written
and before the step was recorded finished)."""

from __future__ import annotations

import json

from trainteam.agents.transcripts import choose_segment, run_dir
from trainteam.workspace import Workspace


def _written(ws, name: str, **record) -> None:
    folder = run_dir(ws, "r1")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps({"status": "ok", **record}))


def test_the_same_execution_after_a_crash_keeps_its_segment_and_a_rerun_gets_the_next(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    assert choose_segment(ws, "r1", "train", 1, "train#1") == "train#1"
    _written(ws, "train#1", execution="train#1")
    assert choose_segment(ws, "r1", "train", 1, "train#1") == "train#1"  # killed before it finished: the same run
    assert choose_segment(ws, "r1", "train", 1, "train#1.extend1") == "train#1.2"  # a person's decision: a new run
    _written(ws, "train#1.2", execution="train#1.extend1")
    assert choose_segment(ws, "r1", "train", 1, "train#1.extend1") == "train#1.2"
    assert choose_segment(ws, "r1", "train", 1, "train#1.extend2") == "train#1.3"
    assert choose_segment(ws, "r1", "train", 1) == "train#1.3"  # outside the engine: the next free segment
