"""The stages a run trains through, as one list the tools walk, and the curriculum's own checks.

A task writes its stages either plainly (``stages: [pretrain, sft, grpo]`` with
``training``/``gates`` keyed by stage) or as a ``curriculum`` of named stages —
``mid_train`` (continued pretraining on a new mix), ``long_context`` (longer
sequences), ... — each with its own data, training settings, eval battery and gate
rules. ``curriculum_from_task`` maps both onto the same filled-in stages, so the
training, evaluation and gate tools have one code path and plain tasks keep working
unchanged. The rules a curriculum must follow are checked where the task is validated
(``workflows.task.check_curriculum``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trainteam.contract.train_task import ALIGN_STAGES, TRAIN_STAGES, CurriculumStage, TrainTask
from trainteam.core.errors import BadInput
from trainteam.trainers.evaluation.battery import default_battery
from trainteam.trainers.evaluation.gates import as_rules


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


def eval_settings(task: TrainTask) -> dict:
    """The task's ``eval`` settings a battery takes: its batch, its precision, the metrics it names, and its answer
    length when it sets one (else the judge sizes it from the held-out answers: ``workflows/steps/eval_length.py``)."""
    out: dict = {"batch_size": task.eval.batch_size, "precision": task.eval.precision}
    if task.eval.max_new_tokens is not None:
        out["max_new_tokens"] = task.eval.max_new_tokens
    if task.eval.metrics is not None:
        out["judged_by"] = list(task.eval.metrics)
    return out


def curriculum_from_task(task: TrainTask) -> Curriculum:
    """The task's stages, filled in: a curriculum's own settings, or the plain
    ``stages``/``training``/``gates`` mapped onto the same shape. A stage without its own
    battery gets its kind's default with the task's ``eval`` settings (tokens, batch)."""
    if task.curriculum is not None:
        written = task.curriculum
    else:
        written = [
            CurriculumStage(
                name=name,
                training=task.training.get(name),
                gates=as_rules(task.gates[name]) if name in task.gates else [],
            )
            for name in task.stages
        ]
    filled = []
    for s in written:
        assert s.kind is not None  # CurriculumStage's validator fills it from the name
        battery = s.battery or default_battery(s.kind).model_copy(update=eval_settings(task))
        filled.append(s.model_copy(update={"training": s.train_config(), "battery": battery}))
    return Curriculum(stages=filled)
