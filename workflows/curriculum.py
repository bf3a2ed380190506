"""Curriculum: the stages of a run beyond pretrain/SFT/align, each with its own data and battery.

A task may list stages such as ``mid_train`` (continued pretraining on a new mix) or
``long_context`` (longer sequences); every stage names its data (default: the task's),
its training settings, its eval battery (default: the fixed one of its stage kind) and
its gate rules. ``curriculum_from_task`` maps the plain ``TrainTask.stages`` list onto
the same shape, so the workflow walks one structure whichever way the task was written.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainteam.errors import BadInput, format_validation_error
from trainteam.trainers.config import Method, TrainConfig
from trainteam.trainers.eval_battery import STAGE_KINDS, BatterySpec, StageKind, default_battery
from trainteam.trainers.gates import GateRule, as_rules
from trainteam.agents.task import DataSpec, TrainTask

# Continued pretraining for the pre-/mid-training kinds; supervised fine-tuning after.
_DEFAULT_METHOD: dict[StageKind, Method] = {
    "pretrain": "pretrain", "mid_train": "pretrain", "long_context": "pretrain", "post_train": "sft",
}


class CurriculumStage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    kind: StageKind | None = Field(default=None, description="default: from the name (mid_train, long_context, sft…)")
    method: Method | None = Field(default=None, description="default: pretrain for pre/mid/long-context, sft after")
    data: DataSpec | None = Field(default=None, description="default: the task's data")
    training: TrainConfig | None = None
    battery: BatterySpec | None = Field(default=None, description="default: the stage kind's fixed battery")
    gates: list[GateRule] = Field(default_factory=list)

    @model_validator(mode="after")
    def _fill_defaults(self) -> "CurriculumStage":
        if self.kind is None:
            if self.name not in STAGE_KINDS:
                raise ValueError(f"stage {self.name!r}: give its kind ({', '.join(_DEFAULT_METHOD)})")
            self.kind = STAGE_KINDS[self.name]
        if self.method is None:
            self.method = self.name if self.name in ("pretrain", "sft", "dpo", "grpo") else _DEFAULT_METHOD[self.kind]
        if self.battery is None:
            self.battery = default_battery(self.kind)
        return self

    def train_config(self) -> TrainConfig:
        cfg = self.training or TrainConfig(method=self.method)
        return cfg.model_copy(update={"method": self.method})


class Curriculum(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stages: list[CurriculumStage] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique(self) -> "Curriculum":
        seen: set[str] = set()
        for s in self.stages:
            if s.name in seen:
                raise ValueError(f"stage {s.name!r} is listed twice")
            seen.add(s.name)
        return self

    def stage(self, name: str) -> CurriculumStage:
        for s in self.stages:
            if s.name == name:
                return s
        raise BadInput(f"curriculum: no stage {name!r} (stages: {', '.join(s.name for s in self.stages)})")

    def previous(self, name: str) -> CurriculumStage | None:
        """The stage before ``name``: what "no regression" gates compare against."""
        names = [s.name for s in self.stages]
        i = names.index(self.stage(name).name)
        return self.stages[i - 1] if i > 0 else None


def parse_curriculum(data: Any, source: str) -> Curriculum:
    """``{"stages": [...]}`` or a bare list of stages, from a task file; errors name the field."""
    if isinstance(data, list):
        data = {"stages": data}
    try:
        return Curriculum.model_validate(data)
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, source)) from None


def curriculum_from_task(task: TrainTask) -> Curriculum:
    """The plain ``stages``/``training``/``gates`` of a TrainTask as a curriculum."""
    stages = []
    for name in task.stages:
        gate = task.gates.get(name)
        stages.append(CurriculumStage(
            name=name, training=task.training.get(name),
            battery=default_battery(name).model_copy(update={"max_new_tokens": task.eval.max_new_tokens,
                                                             "batch_size": task.eval.batch_size}),
            gates=as_rules(gate) if gate is not None else [],
        ))
    return Curriculum(stages=stages)
