"""The task a run stores and hands its workflow reads back knowing which fields a person set (issue 41, item 3:
the config no longer changes shape on its way through DBOS): a GRPO block that leaves its completion length to the
judge still leaves it after the round trip, and one that sets it keeps it."""

from __future__ import annotations

import json
from pathlib import Path

from trainteam.contract.redaction import redacted_task
from trainteam.contract.stage_config import resolve_stage
from trainteam.contract.train_task import TrainTask, load_task_file

TASK = """name: stored
model: {hidden_size: 32, num_layers: 1, num_heads: 2, max_position_embeddings: 128}
data: {demo: addition, n_train: 64, n_eval: 8}
budget: {max_wall_minutes: 5}
stages: [pretrain, grpo]
threads: 3
training:
  grpo: {max_steps: 4, grpo: {num_generations: 2%s}}
"""


def _through_the_run(folder: Path, grpo_extra: str = "") -> tuple[TrainTask, TrainTask]:
    path = folder / "task.yaml"
    path.write_text(TASK % grpo_extra)
    task = load_task_file(path)
    stored = json.loads(json.dumps(redacted_task(task.stored())))  # what the run store and DBOS keep
    return task, TrainTask.model_validate(stored)


def test_a_stored_task_reads_back_the_same_settings(tmp_path):
    task, back = _through_the_run(tmp_path)
    assert back.model_dump() == task.model_dump()
    for stage in ("pretrain", "grpo"):
        assert back.train_config(stage) == task.train_config(stage)


def test_the_judges_completion_length_applies_after_the_round_trip_unless_the_task_set_one(tmp_path):
    task, back = _through_the_run(tmp_path)
    assert resolve_stage(back, "grpo", completion_length=48).grpo.max_completion_length == 48
    assert resolve_stage(task, "grpo", completion_length=48) == resolve_stage(back, "grpo", completion_length=48)
    # the full dump a run used to store marked every field given: the judge's length was dropped
    full = TrainTask.model_validate(json.loads(json.dumps(task.model_dump(mode="json"))))
    assert resolve_stage(full, "grpo", completion_length=48).grpo.max_completion_length != 48
    _, set_by_person = _through_the_run(tmp_path, ", max_completion_length: 32")
    assert resolve_stage(set_by_person, "grpo", completion_length=48).grpo.max_completion_length == 32
