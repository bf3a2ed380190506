"""The stage-config resolver: a task file in trainteam's earlier spelling and one in TRL's resolve to the same
config, under TRL's names; the recipe, a retry's plan and the attempt apply in that order."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainteam.contract.search_spec import SearchSpec
from trainteam.contract.stage_config import StageAttempt, StageOverrides, resolve_stage, with_overrides
from trainteam.contract.train_task import load_task_file
from trainteam.trainers.evaluation.diagnosis import ConfigChanges, RetryPlan
from trainteam.trainers.search.recipe_search import Recipe

HEAD = """name: spelled
model: {hidden_size: 32, num_layers: 1, num_heads: 2, max_position_embeddings: 128}
data: {demo: addition, n_train: 64, n_eval: 8}
budget: {max_wall_minutes: 5}
stages: [pretrain, sft]
"""
EARLIER = HEAD + """training:
  pretrain: {max_steps: 12, per_device_batch_size: 4, grad_accum: 2, seq_len: 64, lr_scheduler: linear,
             learning_rate: 0.002, warmup_steps: 2}
  sft: {num_train_epochs: 2, micro_batch_size: 8, sequence_len: 96, learning_rate: 0.001, use_liger: false}
"""
TRL = HEAD + """training:
  pretrain: {max_steps: 12, per_device_train_batch_size: 4, gradient_accumulation_steps: 2, max_length: 64,
             lr_scheduler_type: linear, learning_rate: 0.002, warmup_steps: 2}
  sft: {num_train_epochs: 2, per_device_train_batch_size: 8, max_seq_length: 96, learning_rate: 0.001,
        use_liger_kernel: false}
"""


def _task(folder: Path, name: str, text: str):
    path = folder / name
    path.write_text(text)
    return load_task_file(path)


def test_a_task_file_in_either_spelling_resolves_to_the_same_config_in_trls_names(tmp_path):
    earlier, trl = _task(tmp_path, "earlier.yaml", EARLIER), _task(tmp_path, "trl.yaml", TRL)
    attempt = StageAttempt(tmp_path / "out", lr_factor=0.5)
    for stage in ("pretrain", "sft"):
        assert resolve_stage(earlier, stage, attempt=attempt) == resolve_stage(trl, stage, attempt=attempt)
    pre = resolve_stage(trl, "pretrain", attempt=attempt).model_dump(mode="json")
    assert {k: pre[k] for k in ("per_device_train_batch_size", "gradient_accumulation_steps", "max_length",
                                "lr_scheduler_type", "learning_rate", "output_dir", "resume")} == \
        {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "max_length": 64,
         "lr_scheduler_type": "linear", "learning_rate": 0.001, "output_dir": str(tmp_path / "out"), "resume": "auto"}
    assert not {"per_device_batch_size", "grad_accum", "seq_len", "lr_scheduler", "use_liger"} & set(pre)
    sft = resolve_stage(earlier, "sft")
    assert (sft.method, sft.num_train_epochs, sft.per_device_train_batch_size, sft.max_length) == ("sft", 2, 8, 96)


def test_an_earlier_name_given_beside_trls_is_refused_naming_both(tmp_path):
    text = TRL.replace("max_length: 64,", "max_length: 64, seq_len: 32,")
    with pytest.raises(Exception, match="max_length and seq_len: the same setting given twice"):
        _task(tmp_path, "twice.yaml", text)


def test_recipe_then_retry_then_attempt(tmp_path):
    task = _task(tmp_path, "trl.yaml", TRL)
    recipe = Recipe(learning_rate=0.004, max_steps=40, per_device_train_batch_size=16, warmup_steps=3)
    # a recipe stored by an earlier version (its batch under trainteam's earlier name) reads the same
    assert Recipe.model_validate({**recipe.model_dump(exclude={"per_device_train_batch_size"}),
                                  "per_device_batch_size": 16}) == recipe
    stored = SearchSpec.model_validate({"stages": {"sft": ["learning_rate", "per_device_batch_size"]}})
    assert stored.stages == {"sft": ["learning_rate", "per_device_train_batch_size"]}  # and a stored search's list
    retry = RetryPlan(action="more_steps", stage="sft", reason="under-fit", changes=ConfigChanges(max_steps=160))
    cfg = resolve_stage(task, "sft", recipe=recipe, retry=retry, attempt=StageAttempt(tmp_path / "a", 0.25))
    assert (cfg.learning_rate, cfg.max_steps, cfg.num_train_epochs, cfg.per_device_train_batch_size,
            cfg.warmup_steps, cfg.output_dir) == (0.001, 160, None, 16, 3, tmp_path / "a")
    stop = RetryPlan(action="stop", stage="sft", reason="data")
    with pytest.raises(ValueError, match="does not retrain"):
        resolve_stage(task, "sft", retry=stop)


def test_the_engineers_overrides_take_either_spelling(tmp_path):
    task = _task(tmp_path, "trl.yaml", TRL)
    ov = StageOverrides.model_validate({"grad_accum": 4, "seq_len": 48})
    assert ov == StageOverrides(gradient_accumulation_steps=4, max_length=48)
    cfg = resolve_stage(with_overrides(task, "pretrain", ov), "pretrain")
    assert (cfg.gradient_accumulation_steps, cfg.max_length, cfg.per_device_train_batch_size) == (4, 48, 4)
