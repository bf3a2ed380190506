"""TrainTask: the typed request a run executes (from a task file, or a sentence the ml_orchestrator parses).

Model, data and budget are required: a run never guesses a data path or spends
without a ceiling. Paths are checked when the task is loaded, so a typo fails
before anything is written.

A task lists its stages one of two ways: the plain ``stages``/``training``/``gates``
(pretrain, SFT, an align method), or a ``curriculum`` of named stages (mid-train,
long-context, ...) each with its own data, training settings, eval battery and gates.
``trainteam.workflows.task.curriculum.curriculum_from_task`` turns either into one list the
tools walk; with a curriculum, ``stages`` is derived (the methods it uses), so the
workflow's per-stage steps (tokenizer, align) apply the same way. ``check_curriculum``
holds the rules that involve more than one stage or the model (order of stages, a
long-context stage's sequence length against the model's context); ``TrainTask`` calls
it while validating, so a bad curriculum is refused with the field named before
anything runs.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from trainteam.contract.redaction import redact_text
from trainteam.contract.search_spec import SearchSpec, align_default_lr, searched_settings
from trainteam.core.errors import BadInput, format_validation_error
from trainteam.core.inputfiles import load_yaml_file
from trainteam.curation.answers import AnswerSpec, default_answer
from trainteam.curation.pipeline import CurationConfig
from trainteam.curation.rows import check_columns
from trainteam.curation.sources import MAX_ROW_BYTES
from trainteam.trainers.evaluation.battery import MAX_NEW_TOKENS, STAGE_KINDS, BatterySpec, StageKind
from trainteam.trainers.evaluation.gates import GateRule
from trainteam.trainers.evaluation.metrics.metric_registry import check_metric, check_names
from trainteam.trainers.evaluation.precision import EvalPrecision
from trainteam.trainers.methods.method_registry import METHODS, align_methods, from_scratch_method, train_methods
from trainteam.trainers.training import key_aliases
from trainteam.trainers.training.config import DistributedSpec, Method, ModelSpec, TokenizerConfig, TrainConfig
from trainteam.trainers.training.stage_change import StageChange, apply_changes

Stage = Method  # a stage of the plain form is named by its method (trainers/methods/)
TRAIN_STAGES = train_methods()
ALIGN_STAGES = align_methods()
MAX_WALL_MINUTES = 43_200  # 30 days


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class DataSpec(_Strict):
    """Either a bundled verifiable demo task or a user's data (``trainteam.curation.rows`` reads it:
    JSON Lines, JSON, CSV, Parquet, a ``datasets`` saved folder or a folder of data files; rows of
    text, prompt/completion, messages or chosen/rejected). Without ``eval_path``, the held-out rows
    are the data's own validation/test split, else a seeded ``eval_fraction`` of its rows."""

    demo: Literal["addition", "subtraction", "multiplication"] | None = None
    path: Path | None = Field(default=None, description="a data file, or a folder (saved dataset, data files)")
    eval_path: Path | None = Field(
        default=None,
        description="held-out rows; default: the data's validation/test split, else eval_fraction of its rows",
    )
    split: str | None = Field(
        default=None, max_length=64, description="the split of path to train on (default: train, or its only split)"
    )
    eval_split: str | None = Field(
        default=None,
        max_length=64,
        description="the split held out (of eval_path, else of path); default: validation, else test",
    )
    columns: dict[str, str] = Field(
        default_factory=dict, description="canonical column -> your column, e.g. {prompt: question, completion: answer}"
    )
    eval_fraction: float = Field(
        default=0.1,
        gt=0,
        lt=1,
        description="share of the rows held out when there is "
        "no eval_path or eval split (seeded by seed; at least 1 row, at most 500)",
    )
    max_row_bytes: int = Field(
        default=MAX_ROW_BYTES,
        ge=1024,
        le=1 << 30,
        description="the bound on one row of path and eval_path (a line, or a row's JSON), in bytes; a longer row "
        "is refused naming it (default 1 MiB: 64 sequences of 4,096 tokens)",
    )
    n_train: int = Field(default=20000, gt=0, le=10_000_000, description="demo only: training problems generated")
    n_eval: int = Field(default=200, gt=0, le=100_000)
    max_operand: int = Field(default=99, gt=0, le=10**12)
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    fixed_width: bool = Field(default=True, description="demo only: zero-pad operands and answers (08+64=072)")
    inject_leaks: int = Field(
        default=0,
        ge=0,
        le=100_000,
        description="demo only: copy this many eval problems into the "
        "training split, so curation has leaks to catch and report",
    )

    @model_validator(mode="after")
    def _one_source(self) -> DataSpec:
        if (self.demo is None) == (self.path is None):
            raise ValueError("give exactly one of data.demo or data.path")
        if self.inject_leaks and self.demo is None:
            raise ValueError("data.inject_leaks: only for the bundled demo data")
        if self.inject_leaks > self.n_eval:
            raise ValueError(f"data.inject_leaks: {self.inject_leaks} is more than n_eval ({self.n_eval})")
        # Fields that differ from their defaults, not ``model_fields_set``: a run hands its task
        # to each step as a full dump, where every field looks "given".
        given = {
            f
            for f in ("eval_path", "split", "eval_split", "columns", "eval_fraction", "max_row_bytes")
            if getattr(self, f) != type(self).model_fields[f].get_default(call_default_factory=True)
        }
        files_only = given
        if self.demo is not None and files_only:
            raise ValueError(f"data.{sorted(files_only)[0]}: only for data.path (the demo generates its own split)")
        if self.eval_path is not None and "eval_fraction" in given:
            raise ValueError("data.eval_fraction: the held-out rows are data.eval_path's; remove one")
        return self

    @field_validator("columns")
    @classmethod
    def _columns(cls, v: dict[str, str]) -> dict[str, str]:
        check_columns(v)
        return v


class BudgetSpec(_Strict):
    max_wall_minutes: float = Field(
        gt=0, le=MAX_WALL_MINUTES, description="at most 30 days: a longer job is several runs"
    )
    max_cost_usd: float = Field(default=0.0, ge=0, le=1_000_000)
    cost_per_hour_usd: float = Field(
        default=0.0, ge=0, le=100_000, description="price of the machine; 0 for a local CPU"
    )
    extension_minutes: float | None = Field(
        default=None,
        gt=0,
        le=MAX_WALL_MINUTES,
        description="what one approved exceed_budget adds to the ceiling; default half of max_wall_minutes",
    )
    max_memory_gib: float | None = Field(
        default=None,
        gt=0,
        le=1 << 20,
        description="the memory one training "
        "process may use (RAM on a CPU, device memory on a GPU; default all of it): "
        "the planner fits each stage within it (gradient checkpointing is kept, "
        "not dropped as wasteful, when the stage needs it to fit)",
    )

    def allowed_s(self) -> float:
        """Seconds the run may spend: the wall ceiling, or less where the cost ceiling comes first."""
        wall = self.max_wall_minutes * 60
        if self.cost_per_hour_usd > 0:
            wall = min(wall, self.max_cost_usd / self.cost_per_hour_usd * 3600)
        return wall

    def extension_s(self) -> float:
        return (self.extension_minutes or self.max_wall_minutes / 2) * 60


class GateSpec(_Strict):
    metric: str = "exact_match"
    min: float | None = Field(default=None, description="absolute lower bound (exact_match: at least this)")
    max: float | None = Field(default=None, description="absolute upper bound (heldout_loss: at most this)")
    max_regression: float | None = Field(
        default=None,
        ge=0,
        le=1e6,
        description="allowed drop against the previous stage (the first stage: against the base model)",
    )

    @model_validator(mode="after")
    def _measurable(self) -> GateSpec:
        if self.min is None and self.max is None and self.max_regression is None:
            raise ValueError(f"gate on {self.metric!r}: give min, max or max_regression")
        check_metric(self.metric, min=self.min, max=self.max)
        return self


class EvalSpec(_Strict):
    max_new_tokens: int | None = Field(
        default=None,
        gt=0,
        le=MAX_NEW_TOKENS,
        description="tokens an answer check "
        "generates; default: the longest held-out answer plus a margin "
        "(trainers/evaluation/answer_length.py)",
    )
    batch_size: int = Field(default=64, gt=0, le=4096)
    metrics: list[str] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description="the metrics that judge the answers (the gate's default rules and the search read them); "
        "default: chosen from the held-out references (trainers/evaluation/answer_style.py)",
    )
    precision: EvalPrecision = Field(
        default="fp32",
        description="the precision checkpoints are scored at, the same for the base and every checkpoint: fp32 "
        "scores the weights as saved; bf16 is about 2x faster on a CPU with native bf16, but its greedy answers "
        "depend on the batching (trainers/evaluation/precision.py)",
    )

    @field_validator("metrics")
    @classmethod
    def _known(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else check_names(v, "eval.metrics")


# Continued pretraining for the pre-/mid-training kinds; supervised fine-tuning after.
DEFAULT_METHOD: dict[str, Method] = {
    "pretrain": "pretrain",
    "mid_train": "pretrain",
    "long_context": "pretrain",
    "post_train": "sft",
}


class PrecheckSpec(_Strict):
    """The ladder pre-check of a user's own data before the real run (``precheck:``)."""

    mode: Literal["auto", "always", "never"] = Field(
        default="auto",
        description="auto: for data.path when the planner's estimate reaches min_minutes or the run costs money",
    )
    reference: Path | None = Field(
        default=None,
        description="a reference data set to compare against; without "
        "one the check is whether a small proxy learns from the data at all",
    )
    min_minutes: float = Field(default=30.0, ge=0, le=MAX_WALL_MINUTES)


class CurriculumStage(_Strict):
    """One stage of a curriculum as a task file writes it. Left out: kind (from the name),
    method (from the kind), data (the task's), training (defaults), battery (the kind's)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    kind: StageKind | None = Field(
        default=None, validate_default=True, description="default: from the name (mid_train, long_context, sft...)"
    )
    method: Method | None = Field(
        default=None, validate_default=True, description="default: pretrain for pre/mid/long-context, sft after"
    )
    data: DataSpec | None = Field(default=None, description="default: the task's data")
    training: TrainConfig | None = None
    battery: BatterySpec | None = Field(default=None, description="default: the stage kind's fixed battery")
    gates: list[GateRule] = Field(default_factory=list)

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: StageKind | None, info: ValidationInfo) -> StageKind | None:
        name = info.data.get("name")
        if v is None and name is not None:  # (a refused name has its own error)
            if name not in STAGE_KINDS:
                raise ValueError(f"give the kind of stage {name!r} ({', '.join(DEFAULT_METHOD)})")
            v = STAGE_KINDS[name]
        return v

    @field_validator("method")
    @classmethod
    def _method(cls, v: Method | None, info: ValidationInfo) -> Method | None:
        name, kind = info.data.get("name"), info.data.get("kind")
        if kind is None:  # the kind was refused: that error says it
            return v
        if v is None:
            v = name if name in METHODS else DEFAULT_METHOD[kind]
        if v in ALIGN_STAGES and kind != "post_train":
            raise ValueError(f"{v} aligns a trained model: its stage kind is post_train, not {kind}")
        return v

    @field_validator("gates", mode="before")
    @classmethod
    def _one_rule(cls, v: Any) -> Any:
        return [v] if isinstance(v, dict) else v  # ``gates: {metric: exact_match, min: 0.5}`` as in plain tasks

    @field_validator("training", mode="before")
    @classmethod
    def _stage_method(cls, v: Any, info: ValidationInfo) -> Any:
        return with_method(v, info.data.get("method"))

    def train_config(self) -> TrainConfig:
        cfg = self.training or TrainConfig(method=self.method)
        return cfg.model_copy(update={"method": self.method})


def with_method(block: Any, method: str | None) -> Any:
    """A stage's training block that holds a method's own TRL key (``beta``, ``loss_type``) gets the
    stage's method when it names none, so the key reaches that method's section (``key_aliases``)."""
    if (
        isinstance(block, dict)
        and method is not None
        and "method" not in block
        and any(k in block for k in key_aliases.METHOD_KEYS)
    ):
        return {"method": method, **block}
    return block


class TrainTask(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", max_length=64)
    workflow: str = "train_model"
    model: ModelSpec
    data: DataSpec
    budget: BudgetSpec
    stages: list[Stage] = Field(
        default_factory=lambda: ["pretrain"],
        min_length=1,
        description="with a curriculum: derived (the methods its stages use)",
    )
    tokenizer: TokenizerConfig = Field(default_factory=TokenizerConfig)
    training: dict[Stage, TrainConfig] = Field(default_factory=dict)
    gates: dict[Stage, GateSpec] = Field(default_factory=dict)
    eval: EvalSpec = Field(default_factory=EvalSpec)
    answer: AnswerSpec = Field(
        default=None,
        validate_default=True,
        description="how an answer is checked (exact "
        "match, format adherence, GRPO rewards, DPO's rejected answers): kind exact | regex | "
        "choice | verifier; default: the demo's numbers on data.demo, else exact normalised text",
    )
    curriculum: list[CurriculumStage] | None = Field(
        default=None,
        min_length=1,
        description="named stages in "
        "order, each with its own data, training, battery and gates; "
        "instead of stages/training/gates",
    )
    curation: dict[str, Any] | None = Field(
        default=None, description="trainteam.curation.CurationConfig fields; default: chosen for the kind of data"
    )
    require_approval: list[str] = Field(
        default_factory=list,
        description="steps that wait for a person before "
        "they start (tools gated on the personas' cards wait in any case)",
    )
    on_gate_failure: Literal["stop", "ask"] = Field(
        default="stop", description="ask: a person may accept a failed gate through the approval queue"
    )
    allow_retry: bool = Field(default=False, description="a failed gate may loop back once with a changed plan")
    threads: int | None = Field(
        default=None,
        gt=0,
        le=1024,
        description="torch threads of every stage that sets none; "
        "None: chosen from the load when the run starts, then fixed and recorded, so a "
        "resumed or replayed run trains on the same count",
    )
    final_tolerance: float = Field(
        default=0.0,
        ge=0,
        le=1e6,
        description="how far final_eval (the weights registered) "
        "may fall below the last passed gate's metrics before the run fails",
    )
    description: str = Field(default="", max_length=20_000)
    search: SearchSpec = Field(
        default_factory=SearchSpec,
        description="the training engineer's recipe search "
        "(true / false, or a block); default: stages that give no recipe are searched",
    )
    align_min_headroom: float = Field(
        default=0.01,
        ge=0,
        le=1,
        description="a DPO/GRPO stage is skipped when the "
        "stage before leaves at most this much of its gate metric to gain (1 - exact "
        "match); 0: only a perfect score skips it",
    )
    precheck: PrecheckSpec = Field(default_factory=PrecheckSpec, description="the ladder pre-check of data.path")
    distributed: DistributedSpec | None = Field(
        default=None,
        description="launch every training stage as "
        "accelerate/torchrun processes: strategy ddp | fsdp | deepspeed, "
        "num_processes, num_machines, machine_rank, main_process_ip, ...",
    )

    @field_validator("search", mode="before")
    @classmethod
    def _search_switch(cls, v: Any) -> Any:
        return {"enabled": v} if isinstance(v, bool) else v

    def _recipe_left_open(self) -> None:
        """Once, when the task is first read: which settings the engineer searches, and the
        align stages' default learning rates (written into their blocks, so a dump carries them)."""
        if self.search.stages is not None:
            return
        blocks = (
            {s.name: s.training for s in self.curriculum}
            if self.curriculum is not None
            else {s: self.training.get(s) for s in self.stages}
        )
        given = {name: set(b.model_fields_set) if b is not None else set() for name, b in blocks.items()}
        methods = {name: self.train_config(name).method for name in blocks}
        align_lr: dict[str, float] = {}
        for name, method in methods.items():
            lr = align_default_lr(method, self.train_config(name).lora is not None)
            if lr is not None and "learning_rate" not in given[name]:
                align_lr[name] = lr
                if self.curriculum is None:
                    self.training = {
                        **self.training,
                        name: self.train_config(name).model_copy(update={"learning_rate": lr}),
                    }
        if self.curriculum is not None:
            self.curriculum = [
                s.model_copy(
                    update={"training": s.train_config().model_copy(update={"learning_rate": align_lr[s.name]})}
                )
                if s.name in align_lr
                else s
                for s in self.curriculum
            ]
        self.search = self.search.model_copy(
            update={"stages": searched_settings(self.search, given, methods), "align_lr": align_lr}
        )

    @model_validator(mode="after")
    def _consistent(self) -> TrainTask:
        if self.curriculum is not None:
            self.stages = check_curriculum(self)
        elif not any(s in TRAIN_STAGES for s in self.stages):
            raise ValueError(f"stages: needs {' or '.join(TRAIN_STAGES)}")
        scratch = from_scratch_method()
        if scratch in self.stages and self.model.path is not None and self.curriculum is None:
            raise ValueError(f"stages: {scratch} starts from random init; model.path is for fine-tuning")
        if scratch not in self.stages and self.model.path is None and self.curriculum is None:
            raise ValueError(
                f"stages: {self.stages[0]} fine-tunes a trained model; give model.path, "
                f"or {scratch} first (stages: [{scratch}, ...])"
            )
        if self.curation is not None:
            try:
                CurationConfig.model_validate(self.curation)
            except ValidationError as exc:
                raise ValueError(format_validation_error(exc, "curation")) from None
        for stage in list(self.training) + list(self.gates):
            if stage not in self.stages:
                raise ValueError(f"training/gates: stage {stage!r} is not in stages")
        configs = {f"training.{k}": v for k, v in self.training.items()}
        configs.update(
            {
                f"curriculum[{i}].training": s.training
                for i, s in enumerate(self.curriculum or [])
                if s.training is not None
            }
        )
        for where, cfg in configs.items():
            _run_owned(cfg, where)
            _launch_owned(cfg, where, self.distributed)
        self._recipe_left_open()
        return self

    @field_validator("training", mode="before")
    @classmethod
    def _stage_methods(cls, v: Any) -> Any:
        return {k: with_method(c, k) for k, c in v.items()} if isinstance(v, dict) else v

    @field_validator("answer", mode="before")
    @classmethod
    def _default_answer(cls, v: Any, info: ValidationInfo) -> Any:
        if v is None:
            data = info.data.get("data")
            return default_answer(demo=data is not None and data.demo is not None)
        return v

    @field_validator("name")
    @classmethod
    def _not_a_secret(cls, v: str) -> str:
        if redact_text(v) != v:  # the name starts every run id, folder and record of the run
            raise ValueError(f"{v[:8]}… looks like a secret key; it would be masked in every record")
        return v

    def stored(self) -> dict[str, Any]:
        """The task as a run stores it and hands it to its workflow (JSON): the fields a person or a decision set,
        so that the task read back knows which those were (a GRPO block that leaves its completion length to the
        judge, a battery that leaves its answer length to the references), as the task first read did."""
        return self.model_dump(mode="json", exclude_unset=True)

    def stage_names(self) -> list[str]:
        """Every stage in order: the curriculum's names, or the plain ``stages``."""
        return [s.name for s in self.curriculum] if self.curriculum is not None else list(self.stages)

    def _curriculum_stage(self, stage: str) -> CurriculumStage:
        for s in self.curriculum or []:
            if s.name == stage:
                return s
        for s in self.curriculum or []:  # an align step asks by method
            if s.method == stage:
                return s
        raise BadInput(f"curriculum: no stage {stage!r} (stages: {', '.join(self.stage_names())})")

    def train_config(self, stage: str, *later: StageChange | None) -> TrainConfig:
        """The training settings of a stage (a curriculum stage by name, or a plain stage): its block with the
        task's own change (``stage_change``: threads, distribution) and the ``later`` ones (the stage resolver's:
        ``trainteam.contract.stage_config.resolve_stage``) applied in their order, validated once
        (ValidationError: a value TrainConfig refuses)."""
        block = self.stage_block(stage)
        return apply_changes(block, self.stage_change(block), *later)

    def stage_block(self, stage: str) -> TrainConfig:
        """A stage's block as the task gives it, its method set (a curriculum stage by name, or a plain stage)."""
        if self.curriculum is not None:
            return self._curriculum_stage(stage).train_config()
        return (self.training.get(stage) or TrainConfig(method=stage)).model_copy(update={"method": stage})

    def stage_change(self, block: TrainConfig) -> StageChange | None:
        """What the task sets in a stage's ``block`` (None: nothing): its ``threads`` where the block sets none,
        and the strategy and process counts of its ``distributed`` block."""
        threads = self.threads if block.threads is None else None
        if threads is None and self.distributed is None:
            return None
        launch = self.distributed.train_fields() if self.distributed is not None else {}
        return StageChange(source="task", threads=threads, **launch)

    def stage_data(self, stage: str) -> DataSpec:
        """The data a stage trains on: a curriculum stage's own, else the task's."""
        if self.curriculum is not None:
            return self._curriculum_stage(stage).data or self.data
        return self.data

    def with_training(self, stage: str, cfg: TrainConfig) -> TrainTask:
        """A copy whose ``stage`` trains with ``cfg`` (the engineer's overrides from the planner)."""
        if self.curriculum is None:
            return self.model_copy(update={"training": {**self.training, stage: cfg}})
        target = self._curriculum_stage(stage)
        stages = [s.model_copy(update={"training": cfg}) if s is target else s for s in self.curriculum]
        return self.model_copy(update={"curriculum": stages})


def _run_owned(cfg: TrainConfig, where: str) -> None:
    """A run decides where each stage writes and when it resumes (its own folders, the newest
    complete checkpoint); a task that sets them would be silently ignored, so it is refused."""
    if cfg.output_dir is not None:
        raise ValueError(f"{where}.output_dir: a run trains each stage in its own workspace folder; remove it")
    if cfg.resume != "auto":
        raise ValueError(
            f"{where}.resume: a run resumes from its own newest complete checkpoint "
            "(`trainteam runs resume RUN`); remove it"
        )


def _launch_owned(cfg: TrainConfig, where: str, dist: DistributedSpec | None) -> None:
    """With a ``distributed:`` block the block sets every stage's strategy and process counts; a stage
    that says otherwise is refused rather than overruled."""
    if dist is None:
        return
    for field, value in dist.train_fields().items():
        given = getattr(cfg, field)
        if given != value and given != TrainConfig.model_fields[field].default:
            raise ValueError(f"{where}.{field}: the task's distributed block sets it ({value}); remove it")


def check_curriculum(task: TrainTask) -> list[str]:
    """Refuse a curriculum that cannot run (ValueError naming the field); return the
    ``stages`` it stands for: the methods it uses, in order, for the workflow's
    per-stage steps (``pretrain`` → tokenizer, ``dpo``/``grpo`` → the align step)."""
    stages = task.curriculum or []
    if any(s.method is None for s in stages):  # the validator fills it in whenever the kind is valid
        raise ValueError("curriculum: every stage needs a method")
    derived = list(dict.fromkeys(cast(str, s.method) for s in stages))
    given = task.model_fields_set
    if (task.training or task.gates) or ("stages" in given and list(task.stages) != derived):
        raise ValueError("curriculum: give the stages either as curriculum or as stages/training/gates, not both")
    seen: set[str] = set()
    for i, s in enumerate(stages):
        if s.name in seen:
            raise ValueError(f"curriculum[{i}].name: stage {s.name!r} is listed twice")
        seen.add(s.name)
    if not any(s.method in TRAIN_STAGES for s in stages):
        raise ValueError("curriculum: needs a stage that trains (method pretrain or sft)")
    aligned = [i for i, s in enumerate(stages) if s.method in ALIGN_STAGES]
    if len(aligned) > 1:
        raise ValueError(f"curriculum[{aligned[1]}].method: one align stage (dpo or grpo) per run")
    if aligned and aligned[0] != len(stages) - 1:
        raise ValueError(
            f"curriculum[{aligned[0]}].method: the align stage runs after the training stages "
            f"and their gate, so it comes last"
        )
    for i, s in enumerate(stages):
        if s.kind == "pretrain" and i > 0:
            raise ValueError(
                f"curriculum[{i}].kind: a pretrain stage starts from random init, so only the first "
                f"stage can be one (continue training with kind mid_train)"
            )
    first = stages[0]
    if task.model.path is not None and first.kind == "pretrain":
        raise ValueError(
            "curriculum[0].kind: pretrain starts from random init; model.path is for continued "
            "training (use kind mid_train or post_train)"
        )
    if task.model.path is None and first.kind != "pretrain":
        raise ValueError(
            f"curriculum[0].kind: without model.path the first stage pretrains from random init "
            f"(kind pretrain), not {first.kind}"
        )
    check_context_length(stages, task.model)
    return derived


def check_context_length(stages: list[CurriculumStage], model: ModelSpec) -> None:
    """A long-context stage trains on longer sequences than the stages before it, and no
    longer than the model's context (``max_position_embeddings``: the built model's, or
    a local model's from its ``config.json``). Cutting its sequences to fit, as the planner
    does for other stages, would defeat the stage: it is refused instead."""
    limit: int | None = model.max_position_embeddings
    where = f"model.max_position_embeddings ({limit})"
    if model.path is not None:
        try:
            limit = json.loads((model.path / "config.json").read_text()).get("max_position_embeddings")
        except (OSError, ValueError):
            limit = None  # a relative path not yet resolved, or no config: checked once resolved
        where = f"the max_position_embeddings of {model.path} ({limit})"
    longest = 0
    for i, s in enumerate(stages):
        seq = s.train_config().max_length
        if s.kind == "long_context":
            if seq <= longest:
                raise ValueError(
                    f"curriculum[{i}].training.max_length: a long_context stage trains on longer "
                    f"sequences than the stages before it ({seq} is not longer than {longest})"
                )
            if limit is not None and seq > limit:
                raise ValueError(
                    f"curriculum[{i}].training.max_length: {seq} is longer than {where}; the model "
                    f"cannot attend that far (build it with a larger max_position_embeddings)"
                )
        longest = max(longest, seq)


def parse_task(data: Any, source: str, base_dir: Path | None = None) -> TrainTask:
    if not isinstance(data, dict):
        raise BadInput(f"{source}: a task must be a mapping of fields, got {type(data).__name__}")
    try:
        task = TrainTask.model_validate(data)
    except ValidationError as exc:
        # pydantic says ``curriculum.1.data``; a person reads ``curriculum[1].data``
        raise BadInput(
            re.sub(r"\bcurriculum\.(\d+)", r"curriculum[\1]", format_validation_error(exc, source))
        ) from None
    return resolve_paths(task, base_dir or Path.cwd(), source)


def _resolve_data(data: DataSpec, base_dir: Path, source: str, prefix: str) -> DataSpec:
    resolved = {}
    for field in ("path", "eval_path"):
        value = getattr(data, field)
        if value is None:
            continue
        path = value if value.is_absolute() else (base_dir / value).resolve()
        if not path.exists():
            raise BadInput(f"{source}: {prefix}.{field}: {value} does not exist")
        if not (path.is_file() or path.is_dir()):
            raise BadInput(f"{source}: {prefix}.{field}: {value} is not a regular file or a folder (a device?)")
        resolved[field] = path
    return data.model_copy(update=resolved)


def _model_folder(path: Path, given: Path, source: str) -> None:
    """A local model folder: config.json and safetensors weights (a ``.bin``-only folder is refused:
    pickled weights run code when loaded)."""
    if not path.exists():
        raise BadInput(f"{source}: model.path: {given} does not exist")
    if not path.is_dir():
        raise BadInput(f"{source}: model.path: {given} is not a folder (a Hugging Face model folder)")
    if not (path / "config.json").is_file():
        raise BadInput(f"{source}: model.path: {given} is not a model folder (no config.json)")
    if not any(path.glob("*.safetensors")) and not (path / "model.safetensors.index.json").is_file():
        raise BadInput(f"{source}: model.path: {given} has no safetensors weights (only safetensors are loaded)")


def resolve_paths(task: TrainTask, base_dir: Path, source: str) -> TrainTask:
    """Make relative paths absolute (relative to the task file) and check they exist."""
    data = _resolve_data(task.data, base_dir, source, "data")
    model = task.model
    if model.path is not None:
        path = model.path if model.path.is_absolute() else (base_dir / model.path).resolve()
        _model_folder(path, model.path, source)
        model = model.model_copy(update={"path": path})
    update: dict[str, Any] = {"data": data, "model": model}
    if task.curriculum is not None:
        update["curriculum"] = [
            s.model_copy(update={"data": _resolve_data(s.data, base_dir, source, f"curriculum[{i}].data")})
            if s.data is not None
            else s
            for i, s in enumerate(task.curriculum)
        ]
        try:
            check_context_length(task.curriculum, model)  # a local model's own context, read from its config
        except ValueError as exc:
            raise BadInput(f"{source}: {exc}") from None
    return task.model_copy(update=update)


def name_from_file(path: Path) -> str:
    """A task's name when its file gives none: the file's stem, in the characters a name may hold
    (``my task.yaml`` -> ``my-task``; nothing left -> ``task``)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(path).stem).lstrip("_.-")[:64].rstrip("-")
    return name or "task"


def load_task_file(path: Path) -> TrainTask:
    """A task YAML file, read with bounds (size, depth, aliases; a regular UTF-8 file). Without a
    ``name`` the task is named after its file."""
    data = load_yaml_file(Path(path), "task file")
    if isinstance(data, dict) and "name" not in data:
        data = {"name": name_from_file(path), **data}
    return parse_task(data, str(path), Path(path).resolve().parent)
