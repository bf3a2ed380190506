"""What a stage trains with: one resolver from the task file to the TrainConfig the trainer gets.

A stage's training settings are decided in one place, in this order, each a typed input:

1. the task (``TrainTask.train_config``): the stage's block as the task file wrote it (either spelling,
   read at the edge by ``key_aliases``), its method, the task's ``threads`` and ``distributed`` block;
   the engineer's per-stage overrides (``StageOverrides``, a plan-first tool's arguments) are written into
   the task before the step runs (``with_overrides``), so the search and the judge read them too;
2. the recipe the search chose (``Recipe``): its rate, length, batch and warm-up in steps;
3. a retry's plan after a failed gate (``RetryPlan``): the judge's changes, its steps over any epochs;
4. the attempt (``StageAttempt``): its folder, resumed from its newest checkpoint, and the learning-rate
   factor a restart after a spike halves; GRPO's completion length where the task left it to the judge.

The result carries TRL/transformers' own names (``per_device_train_batch_size``,
``gradient_accumulation_steps``, ``max_length``...), is validated once more as a whole, and is what the
step trains and records (the stage's Checkpoint node, ``runs show``). It lives in the contract room: the
lowest that sees the task, the search's recipe and the judge's plan.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from trainteam.contract.train_task import TrainTask
from trainteam.trainers.evaluation.diagnosis import RetryPlan
from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.search.recipe_search import Recipe
from trainteam.trainers.training.config import TrainConfig


class StageOverrides(BaseModel):
    """Settings the engineer may change for a stage, each for a reason the planner gave (TRL's names;
    trainteam's earlier ones accepted)."""

    model_config = ConfigDict(extra="forbid")
    max_steps: int | None = Field(default=None, gt=0)
    per_device_train_batch_size: int | None = Field(
        default=None, gt=0, validation_alias=AliasChoices("per_device_train_batch_size", "per_device_batch_size")
    )
    gradient_accumulation_steps: int | None = Field(
        default=None, gt=0, validation_alias=AliasChoices("gradient_accumulation_steps", "grad_accum")
    )
    learning_rate: float | None = Field(default=None, gt=0, lt=1)
    precision: Literal["fp32", "fp16", "bf16"] | None = None
    gradient_checkpointing: bool | None = None
    strategy: Literal["single", "ddp", "fsdp", "zero2", "zero3"] | None = None
    max_length: int | None = Field(default=None, gt=0, validation_alias=AliasChoices("max_length", "seq_len"))


@dataclass(frozen=True)
class StageAttempt:
    """One attempt at a stage: the folder it trains (and resumes) in, and its learning-rate factor (a
    restart after a spike from the stage's start halves it once more)."""

    output_dir: Path
    lr_factor: float = 1.0


def with_overrides(task: TrainTask, stage: str, overrides: StageOverrides) -> TrainTask:
    """The task whose ``stage`` trains with the engineer's overrides (ValidationError: a value TrainConfig
    refuses, as it would refuse it in a task file)."""
    changes = overrides.model_dump(exclude_none=True)
    cfg = TrainConfig.model_validate({**task.train_config(stage).model_dump(), **changes})
    return task.with_training(stage, cfg)


def resolve_stage(
    task: TrainTask,
    stage: str,
    *,
    recipe: Recipe | None = None,
    retry: RetryPlan | None = None,
    attempt: StageAttempt | None = None,
    completion_length: int | None = None,
) -> TrainConfig:
    """The TrainConfig ``stage`` trains with (see the module docstring for the order). ``retry`` must be a
    plan that retrains (the step stops before a plan that does not); ``completion_length`` is GRPO's when
    the task did not set ``grpo.max_completion_length``."""
    cfg = task.train_config(stage)
    changes: dict = {}
    if recipe is not None:  # the probes' warm-up is in steps; the search's length replaces any epochs
        changes.update(recipe.model_dump(), num_train_epochs=None, warmup_ratio=None)
    if retry is not None:
        if not retry.retrains:
            raise ValueError(f"retry: a {retry.action} plan does not retrain")
        given = retry.changes.given()
        changes.update(given)
        if "max_steps" in given and "num_train_epochs" not in given:
            changes["num_train_epochs"] = None  # a stage trained by epochs whose plan sets steps: the steps decide
    if attempt is not None:
        rate = changes.get("learning_rate", cfg.learning_rate)
        changes.update(output_dir=attempt.output_dir, resume="auto", learning_rate=rate * attempt.lr_factor)
    fit = get_method(cfg.method).completion_changes  # a method that samples completions (GRPO) sets their length
    if completion_length is not None and fit is not None:
        changes.update(fit(cfg, completion_length))
    merged = {**cfg.model_dump(), **changes}
    if merged.get("num_train_epochs") is not None and "max_steps" not in changes:
        merged.pop("max_steps", None)  # epochs a plan set replace the steps the stage had
    try:
        return TrainConfig.model_validate(merged)
    except ValidationError as exc:
        raise ValueError(f"training.{stage}: the resolved settings are refused: {exc.errors()[0]['msg']}") from None


def recorded(cfg: TrainConfig) -> dict:
    """What a run records of a resolved config (the Checkpoint node, the step's output, ``runs show``)."""
    return cfg.model_dump(mode="json")
