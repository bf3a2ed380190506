"""A config change is one typed value (``StageChange``): the task's threads and distribution, the engineer's
overrides, the search's recipe, a retry's plan and the attempt apply to a stage's TrainConfig in one order,
validated once; what a person sees of each rule, on real TrainConfig objects."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from trainteam.contract.stage_config import StageAttempt, StageOverrides, resolve_stage, with_overrides
from trainteam.contract.train_task import load_task_file
from trainteam.trainers.evaluation.diagnosis import ConfigChanges, RetryPlan
from trainteam.trainers.search.recipe_search import Recipe
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.stage_change import StageChange, apply_changes

TASK = """name: changes
model: {hidden_size: 32, num_layers: 1, num_heads: 2, max_position_embeddings: 128}
data: {demo: addition, n_train: 64, n_eval: 8}
budget: {max_wall_minutes: 5}
stages: [pretrain, sft]
threads: 3
training:
  pretrain: {max_steps: 12, learning_rate: 0.002, warmup_steps: 2, threads: 2}
  sft: {num_train_epochs: 2, learning_rate: 0.001, warmup_ratio: 0.1}
"""
RECIPE = Recipe(learning_rate=0.004, max_steps=40, per_device_train_batch_size=16, warmup_steps=3)


def _task(folder: Path, text: str = TASK):
    path = folder / "task.yaml"
    path.write_text(text)
    return load_task_file(path)


def _retry(**changes) -> RetryPlan:
    return RetryPlan(action="lower_lr", stage="sft", reason="unstable", changes=ConfigChanges(**changes))


def test_a_retrys_rate_wins_over_the_recipes_and_the_attempts_factor_multiplies_the_final_rate(tmp_path):
    task = _task(tmp_path)
    assert resolve_stage(task, "sft", recipe=RECIPE).learning_rate == 0.004
    assert resolve_stage(task, "sft", recipe=RECIPE, retry=_retry(learning_rate=0.002)).learning_rate == 0.002
    attempt = StageAttempt(tmp_path / "a", lr_factor=0.5)
    cfg = resolve_stage(task, "sft", recipe=RECIPE, retry=_retry(learning_rate=0.002), attempt=attempt)
    assert (cfg.learning_rate, cfg.output_dir, cfg.resume) == (0.001, tmp_path / "a", "auto")
    assert resolve_stage(task, "sft", recipe=RECIPE, attempt=attempt).learning_rate == 0.002  # the recipe's, halved
    # the order is the changes' own, not the order they are handed in
    block = task.stage_block("sft")
    changes = [attempt.change(), _retry(learning_rate=0.002).change(), RECIPE.change()]
    assert apply_changes(block, *changes) == apply_changes(block, *reversed(changes))


def test_the_recipe_clears_the_stages_epochs_and_warmup_ratio(tmp_path):
    task = _task(tmp_path)
    assert (task.train_config("sft").num_train_epochs, task.train_config("sft").warmup_ratio) == (2, 0.1)
    cfg = resolve_stage(task, "sft", recipe=RECIPE)
    assert (cfg.num_train_epochs, cfg.warmup_ratio, cfg.max_steps, cfg.warmup_steps) == (None, None, 40, 3)
    assert cfg.per_device_train_batch_size == 16
    assert RECIPE.change().clears == {"num_train_epochs", "warmup_ratio"}


def test_a_retry_that_sets_epochs_drops_the_steps_and_one_that_sets_steps_drops_the_epochs(tmp_path):
    task = _task(tmp_path)
    by_epochs = resolve_stage(task, "pretrain", retry=_retry(num_train_epochs=3))
    assert by_epochs.num_train_epochs == 3
    assert "max_steps" not in by_epochs.model_dump()  # the epochs decide
    assert by_epochs.max_steps == TrainConfig.model_fields["max_steps"].default
    # after the recipe's steps too: the plan's epochs replace them
    assert resolve_stage(task, "sft", recipe=RECIPE, retry=_retry(num_train_epochs=4)).num_train_epochs == 4
    by_steps = resolve_stage(task, "sft", retry=_retry(max_steps=60))
    assert (by_steps.max_steps, by_steps.num_train_epochs) == (60, None)


def test_the_tasks_threads_apply_unless_the_stage_set_them(tmp_path):
    task = _task(tmp_path)
    assert (task.train_config("pretrain").threads, task.train_config("sft").threads) == (2, 3)
    assert (task.stage_block("pretrain").threads, task.stage_block("sft").threads) == (2, None)
    attempt = StageAttempt(tmp_path / "a")
    assert (resolve_stage(task, "pretrain", attempt=attempt).threads, resolve_stage(task, "sft").threads) == (2, 3)
    plain = _task(tmp_path, TASK.replace("threads: 3\n", ""))
    assert plain.stage_change(plain.stage_block("sft")) is None
    assert plain.train_config("sft") == plain.stage_block("sft")


def test_the_tasks_distributed_block_sets_every_stages_strategy_and_processes(tmp_path):
    task = _task(
        tmp_path, TASK + "distributed: {strategy: ddp, num_processes: 4, num_machines: 2, main_process_ip: 10.0.0.1}\n"
    )
    for stage in ("pretrain", "sft"):
        cfg = resolve_stage(task, stage, attempt=StageAttempt(tmp_path / stage))
        assert (cfg.strategy, cfg.num_nodes, cfg.devices_per_node) == ("ddp", 2, 2)
        assert task.train_config(stage) == resolve_stage(task, stage)


def test_the_engineers_overrides_are_a_change_written_into_the_task(tmp_path):
    task = _task(tmp_path)
    ov = StageOverrides(gradient_accumulation_steps=4, max_length=48)
    assert ov.change() == StageChange(source="overrides", gradient_accumulation_steps=4, max_length=48)
    changed = with_overrides(task, "pretrain", ov)
    cfg = resolve_stage(changed, "pretrain", recipe=RECIPE)
    assert (cfg.gradient_accumulation_steps, cfg.max_length, cfg.learning_rate, cfg.threads) == (4, 48, 0.004, 2)
    with pytest.raises(ValidationError, match="max_steps and num_train_epochs: give one"):
        with_overrides(task, "sft", StageOverrides(max_steps=30))  # a stage trained by epochs


def test_a_refused_value_names_the_stage(tmp_path):
    task = _task(tmp_path)
    with pytest.raises(
        ValueError, match=r"^training\.pretrain: the resolved settings are refused: .*less than or equal to 10"
    ):
        resolve_stage(task, "pretrain", attempt=StageAttempt(tmp_path / "a", lr_factor=10_000.0))
    with pytest.raises(ValueError, match=r"^training\.sft: the resolved settings are refused: .*give one"):
        resolve_stage(task, "sft", retry=_retry(max_steps=60, num_train_epochs=3))
    with pytest.raises(ValueError, match="a stop plan does not retrain"):
        resolve_stage(task, "sft", retry=RetryPlan(action="stop", stage="sft", reason="data"))


def test_a_change_is_one_frozen_typed_value():
    change = StageChange(source="retry", max_steps=60, clears=frozenset({"num_train_epochs"}))
    with pytest.raises(ValidationError):
        change.max_steps = 70  # type: ignore[misc]
    with pytest.raises(ValidationError, match="extra"):
        StageChange(source="retry", sets={"max_steps": 60})  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="max_steps: a change either sets a field or clears it"):
        StageChange(source="retry", max_steps=60, clears=frozenset({"max_steps"}))
    with pytest.raises(ValidationError, match="source"):
        StageChange(source="someone")  # type: ignore[arg-type]
    cfg = TrainConfig(method="sft", max_steps=12)
    assert apply_changes(cfg) is cfg and apply_changes(cfg, None) is cfg  # no change: the config itself
