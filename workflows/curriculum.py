"""The stages a run trains through, as one list the tools walk, and the curriculum's own checks.

A task writes its stages either plainly (``stages: [pretrain, sft, grpo]`` with
``training``/``gates`` keyed by stage) or as a ``curriculum`` of named stages —
``mid_train`` (continued pretraining on a new mix), ``long_context`` (longer
sequences), ... — each with its own data, training settings, eval battery and gate
rules. ``curriculum_from_task`` maps both onto the same filled-in stages, so the
training, evaluation and gate tools have one code path and plain tasks keep working
unchanged.

``check_curriculum`` holds the rules that involve more than one stage or the model
(order of stages, a long-context stage's sequence length against the model's context);
``TrainTask`` calls it while validating, so a bad curriculum is refused with the field
named before anything runs.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from trainteam.workflows.task import ALIGN_STAGES, TRAIN_STAGES, CurriculumStage
from trainteam.core.errors import BadInput
from trainteam.trainers.eval_battery import default_battery
from trainteam.trainers.gates import as_rules

if TYPE_CHECKING:
    from trainteam.workflows.task import TrainTask
    from trainteam.trainers.config import ModelSpec


class Curriculum(BaseModel):
    """Filled-in stages in order: every stage has its kind, method, training and battery."""

    model_config = ConfigDict(extra="forbid")

    stages: list[CurriculumStage] = Field(min_length=1)

    def names(self) -> list[str]:
        return [s.name for s in self.stages]

    def stage(self, name: str) -> CurriculumStage:
        for s in self.stages:
            if s.name == name:
                return s
        raise BadInput(f"curriculum: no stage {name!r} (stages: {', '.join(self.names())})")

    def find(self, name: str) -> CurriculumStage | None:
        return next((s for s in self.stages if s.name == name), None)

    def previous(self, name: str) -> CurriculumStage | None:
        """The stage before ``name``: what "no regression" gates compare against."""
        i = self.names().index(self.stage(name).name)
        return self.stages[i - 1] if i > 0 else None

    def training_stages(self) -> list[CurriculumStage]:
        """The stages the ``train`` step runs, in order (pretrain/SFT methods)."""
        return [s for s in self.stages if s.method in TRAIN_STAGES]

    def align_stage(self) -> CurriculumStage | None:
        """The stage the ``align`` step runs (DPO or GRPO), if any."""
        return next((s for s in self.stages if s.method in ALIGN_STAGES), None)


def curriculum_from_task(task: TrainTask) -> Curriculum:
    """The task's stages, filled in: a curriculum's own settings, or the plain
    ``stages``/``training``/``gates`` mapped onto the same shape. A stage without its own
    battery gets its kind's default with the task's ``eval`` settings (tokens, batch)."""
    if task.curriculum is not None:
        written = task.curriculum
    else:
        written = [CurriculumStage(name=name, training=task.training.get(name),
                                   gates=as_rules(task.gates[name]) if name in task.gates else [])
                   for name in task.stages]
    filled = []
    for s in written:
        battery = s.battery or default_battery(s.kind).model_copy(
            update={"max_new_tokens": task.eval.max_new_tokens, "batch_size": task.eval.batch_size})
        filled.append(s.model_copy(update={"training": s.train_config(), "battery": battery}))
    return Curriculum(stages=filled)


def check_curriculum(task: TrainTask) -> list[str]:
    """Refuse a curriculum that cannot run (ValueError naming the field); return the
    ``stages`` it stands for: the methods it uses, in order, for the workflow's
    per-stage steps (``pretrain`` → tokenizer, ``dpo``/``grpo`` → the align step)."""
    stages = task.curriculum or []
    derived = list(dict.fromkeys(s.method for s in stages))
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
        raise ValueError(f"curriculum[{aligned[0]}].method: the align stage runs after the training stages "
                         f"and their gate, so it comes last")
    for i, s in enumerate(stages):
        if s.kind == "pretrain" and i > 0:
            raise ValueError(f"curriculum[{i}].kind: a pretrain stage starts from random init, so only the first "
                             f"stage can be one (continue training with kind mid_train)")
    first = stages[0]
    if task.model.path is not None and first.kind == "pretrain":
        raise ValueError("curriculum[0].kind: pretrain starts from random init; model.path is for continued "
                         "training (use kind mid_train or post_train)")
    if task.model.path is None and first.kind != "pretrain":
        raise ValueError(f"curriculum[0].kind: without model.path the first stage pretrains from random init "
                         f"(kind pretrain), not {first.kind}")
    check_context_length(stages, task.model)
    return derived


def check_context_length(stages: list[CurriculumStage], model: ModelSpec) -> None:
    """A long-context stage trains on longer sequences than the stages before it, and no
    longer than the model's context (``max_position_embeddings``: the built model's, or
    a local model's from its ``config.json``). Cutting its sequences to fit, as the planner
    does for other stages, would defeat the stage: it is refused instead."""
    limit = model.max_position_embeddings
    where = f"model.max_position_embeddings ({limit})"
    if model.path is not None:
        try:
            limit = json.loads((model.path / "config.json").read_text()).get("max_position_embeddings")
        except (OSError, ValueError):
            limit = None  # a relative path not yet resolved, or no config: checked once resolved
        where = f"the max_position_embeddings of {model.path} ({limit})"
    longest = 0
    for i, s in enumerate(stages):
        seq = s.train_config().seq_len
        if s.kind == "long_context":
            if seq <= longest:
                raise ValueError(f"curriculum[{i}].training.seq_len: a long_context stage trains on longer "
                                 f"sequences than the stages before it ({seq} is not longer than {longest})")
            if limit is not None and seq > limit:
                raise ValueError(f"curriculum[{i}].training.seq_len: {seq} is longer than {where}; the model "
                                 f"cannot attend that far (build it with a larger max_position_embeddings)")
        longest = max(longest, seq)
