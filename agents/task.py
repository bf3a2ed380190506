"""TrainTask: the typed request a run executes (from a task file, or a sentence the ml_orchestrator parses).

Model, data and budget are required: a run never guesses a data path or spends
without a ceiling. Paths are checked when the task is loaded, so a typo fails
before anything is written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainteam.errors import BadInput, format_validation_error
from trainteam.trainers.config import ModelSpec, TokenizerConfig, TrainConfig

Stage = Literal["pretrain", "sft", "dpo", "grpo"]
TRAIN_STAGES = ("pretrain", "sft")
ALIGN_STAGES = ("dpo", "grpo")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DataSpec(_Strict):
    """Either a bundled verifiable demo task or local files (JSONL of prompt/completion)."""

    demo: Literal["addition", "subtraction", "multiplication"] | None = None
    path: Path | None = None
    eval_path: Path | None = None
    n_train: int = Field(default=20000, gt=0)
    n_eval: int = Field(default=200, gt=0)
    max_operand: int = Field(default=99, gt=0)
    seed: int = 0
    inject_leaks: int = Field(default=0, ge=0, description="demo only: copy this many eval problems into the "
                              "training split, so curation has leaks to catch and report")

    @model_validator(mode="after")
    def _one_source(self) -> "DataSpec":
        if (self.demo is None) == (self.path is None):
            raise ValueError("give exactly one of data.demo or data.path")
        if self.inject_leaks and self.demo is None:
            raise ValueError("data.inject_leaks: only for the bundled demo data")
        if self.inject_leaks > self.n_eval:
            raise ValueError(f"data.inject_leaks: {self.inject_leaks} is more than n_eval ({self.n_eval})")
        if self.path is not None and self.eval_path is None:
            raise ValueError("data.eval_path is required with data.path (exact-match needs held-out problems)")
        return self


class BudgetSpec(_Strict):
    max_wall_minutes: float = Field(gt=0)
    max_cost_usd: float = Field(default=0.0, ge=0)
    cost_per_hour_usd: float = Field(default=0.0, ge=0, description="price of the machine; 0 for a local CPU")


class GateSpec(_Strict):
    metric: str = "exact_match"
    min: float | None = Field(default=None, description="absolute threshold")
    max_regression: float | None = Field(default=None, ge=0, description="allowed drop against the previous stage")


class EvalSpec(_Strict):
    max_new_tokens: int = Field(default=8, gt=0)
    batch_size: int = Field(default=64, gt=0)


class TrainTask(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    workflow: str = "train_model"
    model: ModelSpec
    data: DataSpec
    budget: BudgetSpec
    stages: list[Stage] = Field(default_factory=lambda: ["pretrain"], min_length=1)
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    training: dict[Stage, TrainConfig] = Field(default_factory=dict)
    gates: dict[Stage, GateSpec] = Field(default_factory=dict)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    curation: dict[str, Any] | None = Field(default=None, description="trainteam.curation.CurationConfig fields; "
                                            "default: chosen for the kind of data")
    require_approval: list[str] = Field(default_factory=list, description="steps that wait for a person before "
                                        "they start (tools gated on the personas' cards wait in any case)")
    on_gate_failure: Literal["stop", "ask"] = Field(default="stop", description="ask: a person may accept a "
                                                    "failed gate through the approval queue")
    allow_retry: bool = Field(default=False, description="a failed gate may loop back once with a changed plan")
    description: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> "TrainTask":
        if not any(s in TRAIN_STAGES for s in self.stages):
            raise ValueError("stages: needs pretrain or sft")
        if "pretrain" in self.stages and self.model.path is not None:
            raise ValueError("stages: pretrain starts from random init; model.path is for fine-tuning")
        if self.curation is not None:
            from trainteam.curation.pipeline import CurationConfig

            try:
                CurationConfig.model_validate(self.curation)
            except ValidationError as exc:
                raise ValueError(format_validation_error(exc, "curation")) from None
        for stage in list(self.training) + list(self.gates):
            if stage not in self.stages:
                raise ValueError(f"training/gates: stage {stage!r} is not in stages")
        return self

    def train_config(self, stage: str) -> TrainConfig:
        cfg = self.training.get(stage) or TrainConfig(method=stage)
        return cfg.model_copy(update={"method": stage})


def parse_task(data: Any, source: str, base_dir: Path | None = None) -> TrainTask:
    if not isinstance(data, dict):
        raise BadInput(f"{source}: a task must be a mapping of fields, got {type(data).__name__}")
    try:
        task = TrainTask.model_validate(data)
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, source)) from None
    return resolve_paths(task, base_dir or Path.cwd(), source)


def resolve_paths(task: TrainTask, base_dir: Path, source: str) -> TrainTask:
    """Make relative paths absolute (relative to the task file) and check they exist."""
    checks = {"data.path": task.data.path, "data.eval_path": task.data.eval_path, "model.path": task.model.path}
    resolved = {}
    for field, value in checks.items():
        if value is None:
            continue
        path = value if value.is_absolute() else (base_dir / value).resolve()
        if not path.exists():
            raise BadInput(f"{source}: {field}: {value} does not exist")
        resolved[field] = path
    data = task.data.model_copy(update={k.split(".")[1]: v for k, v in resolved.items() if k.startswith("data.")})
    model = task.model.model_copy(update={"path": resolved.get("model.path", task.model.path)})
    return task.model_copy(update={"data": data, "model": model})


def load_task_file(path: Path) -> TrainTask:
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise BadInput(f"{path}: task file not found") from None
    except IsADirectoryError:
        raise BadInput(f"{path}: is a folder, expected a task YAML file") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise BadInput(f"{path}: not valid YAML ({str(exc).splitlines()[0]})") from None
    return parse_task(data, str(path), Path(path).resolve().parent)
