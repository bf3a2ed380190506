"""Curriculum stages beyond pretrain/SFT/align: own data, own battery, defaults per stage kind,
and a bad curriculum refused at load time with the field named (no training involved)."""

from __future__ import annotations

import json

import pytest
import yaml

from trainteam.contract.train_task import TrainTask, load_task_file, parse_task
from trainteam.core.errors import BadInput
from trainteam.trainers.evaluation.battery import DEFAULT_BATTERIES
from trainteam.trainers.evaluation.gates import evaluate_gate
from trainteam.workflows.task.curriculum import curriculum_from_task

BASE = {
    "name": "cur",
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 1024},
    "data": {"demo": "addition", "n_train": 300, "n_eval": 20},
    "budget": {"max_wall_minutes": 10},
}
CURRICULUM = """
curriculum:
  - name: pretrain
    data: {demo: addition, n_train: 2000}
    training: {seq_len: 64}
  - name: mid_train
    data: {demo: multiplication, max_operand: 12}
    training: {seq_len: 64}
    gates: [{metric: heldout_loss, max_regression: 0.5}]
  - name: long_context
    training: {seq_len: 1024, max_steps: 50}
  - name: sft
    battery: {metrics: [exact_match, format_adherence], max_new_tokens: 6}
    gates: {metric: exact_match, min: 0.9}
"""


def _task(curriculum, **changes) -> TrainTask:
    return parse_task({**BASE, "curriculum": curriculum, **changes}, "task.yaml")


def test_stages_with_own_data_and_battery_defaults():
    task = parse_task({**BASE, **yaml.safe_load(CURRICULUM)}, "task.yaml")
    cur = curriculum_from_task(task)
    assert [(s.name, s.kind, s.method) for s in cur.stages] == [
        ("pretrain", "pretrain", "pretrain"),
        ("mid_train", "mid_train", "pretrain"),
        ("long_context", "long_context", "pretrain"),
        ("sft", "post_train", "sft"),
    ]
    # the workflow's per-stage steps see the methods: tokenizer for pretrain, no align step
    assert task.stages == ["pretrain", "sft"]
    assert task.stage_names() == ["pretrain", "mid_train", "long_context", "sft"]
    mid = cur.stage("mid_train")
    assert mid.data.demo == "multiplication" and mid.data.max_operand == 12
    assert mid.battery == DEFAULT_BATTERIES["mid_train"]
    assert cur.stage("long_context").data is None  # the task's data
    long_context = task.train_config("long_context")
    assert long_context.max_length == 1024 and long_context.method == "pretrain"
    assert cur.stage("sft").battery.metrics == ["exact_match", "format_adherence"]
    assert [(g.metric, g.min) for g in cur.stage("sft").gates] == [("exact_match", 0.9)]  # one mapping = one rule
    assert cur.previous("mid_train").name == "pretrain" and cur.previous("pretrain") is None
    assert [s.name for s in cur.training_stages()] == task.stage_names() and cur.align_stage() is None
    # The stage's gate compares against the stage before it.
    d = evaluate_gate(
        "mid_train",
        {"heldout_loss": 2.0},
        mid.gates,
        previous={"heldout_loss": 1.2},
        previous_stage=cur.previous("mid_train").name,
    )
    assert not d.passed and "against pretrain" in d.reasons[0]
    # what the engine stores and validates again is the same task
    assert TrainTask.model_validate(json.loads(task.model_dump_json())) == task


def test_plain_task_maps_onto_the_curriculum():
    task = TrainTask.model_validate(
        {
            **BASE,
            "stages": ["pretrain", "sft", "grpo"],
            "gates": {"grpo": {"metric": "exact_match", "min": 0.95, "max_regression": 0.01}},
            "eval": {"max_new_tokens": 5},
        }
    )
    cur = curriculum_from_task(task)
    assert [s.kind for s in cur.stages] == ["pretrain", "post_train", "post_train"]
    assert [s.name for s in cur.training_stages()] == ["pretrain", "sft"] and cur.align_stage().name == "grpo"
    grpo = cur.stage("grpo")
    assert grpo.method == "grpo" and grpo.battery.max_new_tokens == 5
    assert [(g.metric, g.min, g.max_regression) for g in grpo.gates] == [("exact_match", 0.95, 0.01)]
    assert cur.stage("sft").gates == []
    assert task.stage_names() == ["pretrain", "sft", "grpo"]


def test_overrides_land_on_the_named_stage():
    task = _task(
        [{"name": "pretrain", "training": {"seq_len": 32}}, {"name": "warmup", "kind": "mid_train"}, {"name": "sft"}]
    )
    changed = task.with_training("warmup", task.train_config("warmup").model_copy(update={"max_steps": 7}))
    assert changed.train_config("warmup").max_steps == 7 and changed.train_config("warmup").method == "pretrain"
    assert changed.train_config("sft") == task.train_config("sft")


LONG = {"name": "long_context", "training": {"seq_len": 2048}}
CASES = {
    "unknown kind": ([{"name": "pretrain"}, {"name": "warmup"}], "curriculum[1].kind: give the kind of stage 'warmup'"),
    "listed twice": (
        [{"name": "pretrain"}, {"name": "sft"}, {"name": "sft"}],
        "curriculum[2].name: stage 'sft' is listed twice",
    ),
    "bad battery": ([{"name": "pretrain", "battery": {"metrics": ["vibes"]}}], "curriculum[0].battery.metrics"),
    "two data sources": (
        [{"name": "pretrain"}, {"name": "mid_train", "data": {"demo": "addition", "path": "x.jsonl"}}],
        "curriculum[1].data: give exactly one of data.demo or data.path",
    ),
    "bad data field": (
        [{"name": "pretrain"}, {"name": "mid_train", "data": {"demo": "addition", "n_train": 0}}],
        "curriculum[1].data.n_train:",
    ),
    "unknown stage field": ([{"name": "pretrain", "epochs": 2}], "curriculum[0].epochs: unknown field"),
    "align mid-way": (
        [{"name": "pretrain"}, {"name": "grpo"}, {"name": "sft"}],
        "curriculum[1].method: the align stage runs after the training stages",
    ),
    "align method on a mid-train": (
        [{"name": "pretrain"}, {"name": "mid_train", "method": "dpo"}],
        "curriculum[1].method: dpo aligns a trained model",
    ),
    "pretrain later": (
        [{"name": "pretrain"}, {"name": "again", "kind": "pretrain"}],
        "curriculum[1].kind: a pretrain stage starts from random init",
    ),
    "no pretrain first": ([{"name": "sft"}], "curriculum[0].kind: without model.path the first stage pretrains"),
    "context too long": (
        [{"name": "pretrain", "training": {"seq_len": 64}}, LONG],
        "curriculum[1].training.max_length: 2048 is longer than model.max_position_embeddings (1024)",
    ),
    "context not longer": (
        [{"name": "pretrain", "training": {"seq_len": 64}}, {"name": "long_context", "training": {"seq_len": 64}}],
        "curriculum[1].training.max_length: a long_context stage trains on longer sequences",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_curriculum_names_the_field(case):
    curriculum, expected = CASES[case]
    with pytest.raises(BadInput) as err:
        _task(curriculum)
    msg = str(err.value)
    assert msg.startswith("task.yaml: ") and expected in msg and "\n" not in msg, msg


def test_curriculum_or_plain_stages_not_both():
    with pytest.raises(BadInput, match="give the stages either as curriculum or as stages/training/gates"):
        _task([{"name": "pretrain"}], stages=["pretrain"] * 1 + ["sft"])
    with pytest.raises(BadInput, match="not both"):
        _task([{"name": "pretrain"}], training={"pretrain": {"max_steps": 3}})


def test_stage_paths_resolve_against_the_task_file(tmp_path):
    rows = "".join(json.dumps({"prompt": f"{i}*2=", "completion": str(2 * i)}) + "\n" for i in range(5))
    (tmp_path / "mid.jsonl").write_text(rows)
    (tmp_path / "mid_eval.jsonl").write_text(rows)
    body = {
        **BASE,
        "curriculum": [
            {"name": "pretrain"},
            {"name": "mid_train", "data": {"path": "mid.jsonl", "eval_path": "mid_eval.jsonl"}},
        ],
    }
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(body))
    task = load_task_file(tmp_path / "task.yaml")
    assert task.curriculum[1].data.path == tmp_path / "mid.jsonl"
    body["curriculum"][1]["data"]["eval_path"] = "missing.jsonl"
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(body))
    with pytest.raises(BadInput, match=r"task.yaml: curriculum\[1\].data.eval_path: missing.jsonl does not exist"):
        load_task_file(tmp_path / "task.yaml")


def test_long_context_against_a_local_models_own_context(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama", "max_position_embeddings": 128}))
    (model / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")  # an empty, sound file
    body = {
        **BASE,
        "model": {"path": "model"},
        "curriculum": [{"name": "mid_train", "training": {"seq_len": 64}}, LONG | {"training": {"seq_len": 256}}],
    }
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(body))
    with pytest.raises(
        BadInput,
        match=r"curriculum\[1\].training.max_length: 256 is longer than the "
        r"max_position_embeddings of .*model \(128\)",
    ):
        load_task_file(tmp_path / "task.yaml")
    body["curriculum"][1]["training"]["seq_len"] = 128
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(body))
    task = load_task_file(tmp_path / "task.yaml")
    # continued pretraining of a local model keeps its tokenizer: "pretrain" is the method, not random init
    assert task.stages == ["pretrain"] and task.model.path == model
    with pytest.raises(BadInput, match=r"curriculum\[0\].kind: pretrain starts from random init"):
        _task([{"name": "pretrain"}], model={"path": str(model)})
