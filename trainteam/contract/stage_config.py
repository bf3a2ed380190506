"""What a stage trains with: one resolver from the task file to the TrainConfig the trainer gets.

Every source of a stage's settings after its block says what it changes as one typed value, a
``StageChange`` (``trainers/training/stage_change.py``), and ``apply_changes`` applies them to the stage's
block in one order, validating the result once:

1. ``task``: the task's ``threads`` (where the block sets none) and its ``distributed`` block
   (``TrainTask.stage_change``); the block itself is the stage's as the task file wrote it (either spelling,
   read at the edge by ``key_aliases``), its method set (``TrainTask.stage_block``);
2. ``overrides``: the engineer's per-stage overrides (``StageOverrides``, a plan-first tool's arguments),
   applied after step 1 and written back into the task's block before the step runs (``with_overrides``), so
   the search and the judge read them too;
3. ``recipe``: the recipe the search chose (``Recipe.change``): its rate, length, batch and warm-up in
   steps, which replace any epochs and warm-up ratio;
4. ``retry``: a retry's plan after a failed gate (``RetryPlan.change``): the judge's changes, its steps over
   any epochs (and its epochs over any steps);
5. ``attempt``: the attempt (``StageAttempt.change``): its folder, resumed from its newest checkpoint, and
   the learning-rate factor a restart after a spike halves, times the rate the changes before it left;
6. ``completion``: GRPO's completion length where the task left it to the judge (the method's
   ``completion_changes``).

``TrainTask.train_config(stage, *later)`` applies them (``resolve_stage`` hands it steps 3-6; alone, it is
step 1). The result carries TRL/transformers' own names (``per_device_train_batch_size``,
``gradient_accumulation_steps``, ``max_length``...) and is what the step trains and records (the stage's
Checkpoint node, ``runs show``). It lives in the contract room: the lowest that sees the task, the search's
recipe and the judge's plan.
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
from trainteam.trainers.training.stage_change import StageChange, apply_changes


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

    def change(self) -> StageChange:
        """The overrides as a change to the stage's settings (a field left None: unchanged)."""
        return StageChange(source="overrides", **dict(self))


@dataclass(frozen=True)
class StageAttempt:
    """One attempt at a stage: the folder it trains (and resumes) in, and its learning-rate factor (a
    restart after a spike from the stage's start halves it once more)."""

    output_dir: Path
    lr_factor: float = 1.0

    def change(self) -> StageChange:
        """The attempt as a change: its folder, resumed from its newest checkpoint, its rate factor."""
        return StageChange(source="attempt", output_dir=self.output_dir, resume="auto", lr_factor=self.lr_factor)


def with_overrides(task: TrainTask, stage: str, overrides: StageOverrides) -> TrainTask:
    """The task whose ``stage`` trains with the engineer's overrides, applied to its settings (the task's
    threads and distribution included) and written back as its block (ValidationError: a value TrainConfig
    refuses, as it would refuse it in a task file)."""
    return task.with_training(stage, apply_changes(task.train_config(stage), overrides.change()))


def resolve_stage(
    task: TrainTask,
    stage: str,
    *,
    recipe: Recipe | None = None,
    retry: RetryPlan | None = None,
    attempt: StageAttempt | None = None,
    completion_length: int | None = None,
) -> TrainConfig:
    """The TrainConfig ``stage`` trains with: its block and the changes in the module docstring's order. ``retry``
    must be a plan that retrains (ValueError otherwise: the step stops before a plan that does not);
    ``completion_length`` is GRPO's when the task did not set ``grpo.max_completion_length``. A value the
    resolved config refuses: ValueError naming ``training.<stage>``."""
    block = task.stage_block(stage)
    fit = get_method(block.method).completion_changes  # a method that samples completions (GRPO) sets their length
    changes = (
        recipe.change() if recipe is not None else None,
        retry.change() if retry is not None else None,
        attempt.change() if attempt is not None else None,
        fit(block, completion_length) if completion_length is not None and fit is not None else None,
    )
    try:  # the block and the task's own change, then these: one apply_changes, validated once
        return task.train_config(stage, *changes)
    except ValidationError as exc:
        raise ValueError(f"training.{stage}: the resolved settings are refused: {exc.errors()[0]['msg']}") from None


def recorded(cfg: TrainConfig) -> dict:
    """What a run records of a resolved config (the Checkpoint node, the step's output, ``runs show``)."""
    return cfg.model_dump(mode="json")
