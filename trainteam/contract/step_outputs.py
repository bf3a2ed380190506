"""What each step records in its ``StepResult.details``, read back typed by the steps, the engine and the report
after it (issue 41): ``TrainOutput`` (the train and align steps), ``EvalOutput`` (evaluate, final_eval),
``GateOutput`` (a gate), ``CorpusOutput`` (prepare_corpus), ``SealedOutput`` (sealed_test).

Nothing outside this module reads ``details`` by key (``tests/architecture/test_step_details.py`` counts the
reads: none). A stored run of an earlier shape reads: every field has a default, and keys a model does not name
are kept (``extra="allow"``), so a run recorded before a field existed reads with that field's default.
"""

from __future__ import annotations

from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field

from trainteam.contract.step_io import StepResult
from trainteam.trainers.evaluation.answer_length import GenerationBudget
from trainteam.trainers.evaluation.stage_gate import StageInput
from trainteam.trainers.training.config import TrainConfig


class StepOutput(BaseModel):
    """A step's recorded output, typed (the base of each step's own model). ``marks`` are keys only that kind of
    step records: another step's output (a run's outputs are often searched for one kind) reads as empty."""

    model_config = ConfigDict(extra="allow")
    marks: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def of(cls, result: StepResult) -> Self:
        """The output ``result`` recorded, typed; another kind of step's output reads as one that recorded nothing."""
        return cls.model_validate(result.details) if cls.written_by(result) else cls()

    @classmethod
    def written_by(cls, result: StepResult) -> bool:
        """Whether this kind of step wrote ``result`` (it recorded one of the kind's own keys)."""
        return any(k in result.details for k in cls.marks)

    @classmethod
    def stored(cls, output: Any) -> Self:
        """The typed output of a step's output as the run store keeps it (its JSON; None or junk reads empty)."""
        return cls.of(StepResult.model_validate(output)) if isinstance(output, dict) else cls()


class TrainOutput(StepOutput):
    """What the train and align steps record: the stages trained, the files they trained on, their curves, the
    resolved config each stage trained with, what each stage started from and the recipe search's report (and,
    from the train step, each earlier stage's battery and gate)."""

    marks = ("losses", "configs", "trained_on", "checkpoints", "search")

    stages: list[str] = Field(default_factory=list, description="the stages trained, in order")
    stage: str | None = Field(None, description="the stage a spike, a budget stop or a failed stage gate is about")
    trained_on: list[str] = Field(default_factory=list, description="every data file the weights trained on")
    losses: dict[str, list[Any]] = Field(default_factory=dict, description="stage -> its (step, loss) points")
    events: list[dict[str, Any]] = Field(default_factory=list)
    spikes: list[dict[str, Any]] = Field(default_factory=list, description="each spike the monitor saw")
    configs: dict[str, dict[str, Any]] = Field(
        default_factory=dict, description="stage -> the resolved TrainConfig it trained with (JSON)"
    )
    inputs: dict[str, StageInput] = Field(default_factory=dict, description="stage -> what it started from")
    base: StageInput | None = Field(None, description="the run's first stage's input (the task's model, measured)")
    search: dict[str, dict[str, Any]] = Field(default_factory=dict, description="stage -> the recipe search report")
    stage_evals: dict[str, dict[str, float]] = Field(default_factory=dict, description="stage -> its battery's scores")
    stage_gates: dict[str, dict[str, Any]] = Field(default_factory=dict, description="stage -> its gate's verdict")

    def config(self, stage: str) -> TrainConfig | None:
        """The resolved config ``stage`` trained with, typed; None when the step kept none (or, in a run recorded
        by an earlier version, only four of its fields)."""
        recorded = self.configs.get(stage) or {}
        return TrainConfig.model_validate(recorded) if "method" in recorded else None

    def chosen(self, stage: str) -> dict[str, Any]:
        """The settings the recipe search chose for ``stage`` (empty: no search)."""
        return (self.search.get(stage) or {}).get("chosen") or {}

    def probes(self, stage: str) -> list[dict[str, Any]]:
        """The recipe search's probes of ``stage``, as recorded."""
        return list((self.search.get(stage) or {}).get("probes") or [])

    def spikes_in(self, stage: str) -> int:
        return sum(1 for s in self.spikes if s.get("stage") == stage)


class EvalOutput(StepOutput):
    """What an evaluation step records: the stage measured, its held-out rows, a few answers, how the answers
    were judged, the generation length and precision, the base model's scores and the decontamination."""

    marks = ("n_eval",)

    stage: str | None = None
    stages: list[str] = Field(default_factory=list)
    n_eval: int | None = Field(None, description="held-out problems scored")
    samples: list[dict[str, Any]] = Field(default_factory=list)
    answers: dict[str, Any] | None = Field(None, description="the answer style (AnswerStyle's JSON)")
    misses: dict[str, Any] = Field(default_factory=dict)
    generation: GenerationBudget | None = None
    precision: str | None = None
    base: StageInput | None = None
    decontamination: dict[str, Any] | None = None
    measured_by: str | None = Field(None, description="the eval step that measured the very weights before")

    @property
    def answer_tokens(self) -> int | None:
        """max_new_tokens of the answer checks (None: no answer check ran)."""
        return self.generation.tokens if self.generation is not None else None


class GateOutput(StepOutput):
    """What a gate step records, read back typed by the steps and the engine after it: the metrics it judged and
    the ones it checked, its reasons, who accepted a failed gate, and after a failure the judge's diagnosis
    (``trainers/evaluation/diagnosis.Diagnosis``'s JSON, validated where it is used)."""

    marks = ("judged", "passed")

    stage: str | None = None
    passed: bool | None = None
    reasons: list[str] = Field(default_factory=list)
    accepted_by: str | None = None
    judged: dict[str, float] = Field(default_factory=dict)
    checked: list[str] = Field(default_factory=list)
    diagnosis: dict[str, Any] | None = None


class CorpusOutput(StepOutput):
    """What prepare_corpus records: the stages with data of their own, where the eval rows came from, and how
    the sealed test part was sized (or why there is none)."""

    marks = ("stage_data", "eval_from")

    stage_data: list[str] = Field(default_factory=list)
    eval_from: dict[str, Any] = Field(default_factory=dict, description="<stage>.eval -> where its rows came from")
    sealed_test: str | None = Field(None, description="how the sealed test part was cut, or why there is none")


class SealedOutput(StepOutput):
    """What sealed_test records: the rows scored once, the dev scores beside them and how the part was sized."""

    marks = ("n_test",)

    stage: str | None = None
    n_test: int | None = None
    dev: dict[str, float] = Field(default_factory=dict)
    gap: dict[str, float] = Field(default_factory=dict)
    sizing: str = ""
    pairwise: dict[str, Any] | None = None


class RegisterOutput(StepOutput):
    """What register_model records: the registered model's id."""

    marks = ("model_id",)
    model_id: str | None = None


class ChoiceOutput(StepOutput):
    """What a step that chose to skip records (the align step's headroom check): the choice and its evidence."""

    marks = ("choice",)
    choice: dict[str, Any] | None = None
