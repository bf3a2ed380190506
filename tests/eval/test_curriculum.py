"""Curriculum stages beyond pretrain/SFT/align: own data, own battery, defaults per stage kind."""

from __future__ import annotations

import pytest
import yaml

from trainteam.errors import BadInput
from trainteam.trainers.eval_battery import DEFAULT_BATTERIES
from trainteam.workflows.curriculum import curriculum_from_task, parse_curriculum
from trainteam.trainers.gates import evaluate_gate
from trainteam.agents.task import TrainTask

TASK_YAML = """
stages:
  - name: pretrain
    data: {demo: addition, n_train: 2000}
  - name: mid_train
    data: {demo: multiplication, max_operand: 12}
    gates: [{metric: heldout_loss, max_regression: 0.5}]
  - name: long_context
    training: {seq_len: 1024, max_steps: 50}
  - name: sft
    battery: {metrics: [exact_match, format_adherence], max_new_tokens: 6}
    gates: [{metric: exact_match, min: 0.9}]
"""


def test_stages_with_own_data_and_battery_defaults():
    cur = parse_curriculum(yaml.safe_load(TASK_YAML), "task.yaml")
    assert [(s.name, s.kind, s.method) for s in cur.stages] == [
        ("pretrain", "pretrain", "pretrain"), ("mid_train", "mid_train", "pretrain"),
        ("long_context", "long_context", "pretrain"), ("sft", "post_train", "sft")]
    mid = cur.stage("mid_train")
    assert mid.data.demo == "multiplication" and mid.data.max_operand == 12
    assert mid.battery == DEFAULT_BATTERIES["mid_train"]
    assert cur.stage("long_context").data is None  # the task's data
    assert cur.stage("long_context").train_config().seq_len == 1024
    assert cur.stage("sft").battery.metrics == ["exact_match", "format_adherence"]
    assert cur.previous("mid_train").name == "pretrain" and cur.previous("pretrain") is None
    # The stage's gate compares against the stage before it.
    d = evaluate_gate("mid_train", {"heldout_loss": 2.0}, mid.gates, previous={"heldout_loss": 1.2},
                      previous_stage=cur.previous("mid_train").name)
    assert not d.passed and "against pretrain" in d.reasons[0]


def test_bad_curriculum_names_the_field():
    with pytest.raises(BadInput, match="task.yaml: stages.0: .*give its kind"):
        parse_curriculum([{"name": "warmup"}], "task.yaml")
    with pytest.raises(BadInput, match="listed twice"):
        parse_curriculum([{"name": "sft"}, {"name": "sft"}], "task.yaml")
    with pytest.raises(BadInput, match=r"stages.0.battery.metrics"):
        parse_curriculum([{"name": "sft", "battery": {"metrics": ["vibes"]}}], "task.yaml")


def test_plain_task_maps_onto_the_curriculum():
    task = TrainTask.model_validate({
        "name": "demo", "model": {"hidden_size": 64}, "data": {"demo": "addition"},
        "budget": {"max_wall_minutes": 10}, "stages": ["pretrain", "sft", "grpo"],
        "gates": {"grpo": {"metric": "exact_match", "min": 0.95, "max_regression": 0.01}},
        "eval": {"max_new_tokens": 5},
    })
    cur = curriculum_from_task(task)
    assert [s.kind for s in cur.stages] == ["pretrain", "post_train", "post_train"]
    grpo = cur.stage("grpo")
    assert grpo.method == "grpo" and grpo.battery.max_new_tokens == 5
    assert [(g.metric, g.min, g.max_regression) for g in grpo.gates] == [("exact_match", 0.95, 0.01)]
    assert cur.stage("sft").gates == []
