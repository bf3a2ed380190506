"""The corridor between the workflow engine, the persona runtime and the step tools.

- ``StepResult``: what a step hands back (small: paths, metrics, node ids; DBOS checkpoints it).
  When only a person can say how to go on, it carries ``needs``: a ``NeedsPerson`` (what to
  approve, the evidence, and how the step resumes if approved). The engine has one branch for it.
- ``StepInputs``: what people's decisions changed for a step's re-run (a restart to apply, gates
  accepted, weights kept, budget extended) plus the curves carried over from the attempt before.
  The engine builds it (``after``) and the step reads its typed fields; nothing else writes it.
- ``ToolContext``: what a step tool receives; ``StepTool``: a tool as the persona runtime
  registers it (its function, argument model, plan and the facts the offline policy may read).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, JsonValue, model_validator

from trainteam.contract.train_task import BudgetSpec, TrainTask
from trainteam.trainers.evaluation.battery import BatterySpec
from trainteam.trainers.training.results import RestartProposal

Outcome = Literal[
    "ok",
    "passed",
    "failed",
    "skipped",
    "spike",
    "spike_limit",
    "stage_gate_failed",
    "over_budget",
    "too_much_dropped",
    "needs_approval",
    "error",
]

# How a step goes on once a person approved what it asked:
# restart: apply the spike restart proposal; accept_stage_gate: promote a curriculum stage whose gate failed;
# keep_spiked: keep the weights from before an unresolved spike; extend_budget: the same work, resumed from its
# checkpoint under the extension; accept_gate: promote a failed gate; conversation: the persona's paused
# conversation continues with the decision (pydantic-ai deferred tool call); go_ahead: start the step;
# accept_curation: train on what curation left, although it removed more than the task's max_drop_fraction.
ResumeKind = Literal[
    "restart",
    "accept_stage_gate",
    "keep_spiked",
    "extend_budget",
    "accept_gate",
    "conversation",
    "go_ahead",
    "accept_curation",
]


class Carried(BaseModel):
    """What a re-run continues from the attempt before it: loss curves, events, spike history."""

    model_config = ConfigDict(extra="forbid")
    losses: dict[str, list] = Field(default_factory=dict)
    events: list[dict[str, Any]] = Field(default_factory=list)
    spikes: list[dict[str, Any]] = Field(default_factory=list)


class Decision(BaseModel):
    """A person's decision as the approval queue records it (``approvals.read_decision``)."""

    model_config = ConfigDict(extra="ignore")
    id: str = ""
    status: str
    decided_by: str | None = None
    note: str | None = None


class RestartPlan(BaseModel):
    """The spike restart a person approved: where the stage goes on, at which learning-rate factor."""

    model_config = ConfigDict(extra="forbid")
    stage: str
    from_start: bool = False
    spike_step: int
    reason: str = ""
    output_dir: str | None = None
    lr_factor: float = 1.0
    proposal: RestartProposal | None = Field(None, description="the roll-back (None: from the stage's start)")


class KeepProposal(BaseModel):
    """The weights a person may keep as a stage's result after an unresolved spike (what the step proposes)."""

    model_config = ConfigDict(extra="forbid")
    stage: str
    keep: str
    spike_step: int
    reason: str = ""


class KeptWeights(KeepProposal):
    """The weights a person kept as a stage's result after an unresolved spike, with the approval."""

    approval: Decision


class Resume(BaseModel):
    """How the step re-runs if a person approves: its kind, and for a spike the restart proposed (``restart``) or
    the weights to keep (``keep``). A resume stored before these were typed (one ``value`` dict) reads: its value
    goes to the field its kind names."""

    model_config = ConfigDict(extra="forbid")
    kind: ResumeKind
    stage: str | None = None
    restart: RestartPlan | None = Field(None, description="restart: the spike restart proposed")
    keep: KeepProposal | None = Field(None, description="keep_spiked: the weights to keep as the stage's result")
    pending: dict[str, JsonValue] | None = Field(None, description="conversation: the persona's paused run (JSON)")

    @model_validator(mode="before")
    @classmethod
    def _stored_value(cls, data: Any) -> Any:
        """The shape stored before the payloads were typed: ``value`` holds the restart or the weights to keep."""
        if not isinstance(data, dict) or "value" not in data:
            return data
        data = dict(data)
        value = data.pop("value") or None
        if value is not None and data.get("kind") in ("restart", "keep_spiked"):
            data["restart" if data["kind"] == "restart" else "keep"] = value
        return data

    @model_validator(mode="after")
    def _payload(self) -> Resume:
        if self.kind == "restart" and self.restart is None:
            raise ValueError("a restart resumes with the restart proposed (restart)")
        if self.kind == "keep_spiked" and self.keep is None:
            raise ValueError("keeping spiked weights resumes with the weights to keep (keep)")
        return self


class NeedsPerson(BaseModel):
    """A step that cannot go on without a person: what to approve, why, and how it resumes."""

    model_config = ConfigDict(extra="forbid")
    action: str = Field(description="the approval's action; the engine numbers repeated asks within a step visit")
    proposed: dict[str, JsonValue] = Field(
        default_factory=dict, description="what the person approves, as the approval queue stores and shows it"
    )
    evidence: dict[str, JsonValue] = Field(
        default_factory=dict, description="what the person sees to decide (metrics, gates, curves), as stored"
    )
    resume: Resume
    requested_by: str = ""
    refused: str = Field("approval", description="what a person's no refuses, in the run's error: restart, …")
    numbered: bool = Field(False, description="number the action per ask (one visit may ask it more than once)")
    carried: Carried | None = None


class StepResult(BaseModel):
    """A step's recorded output: small (paths, metrics), because DBOS checkpoints it. The engine turns the
    checkpointed JSON into this model once, where it reads a step's result; steps read the typed accessors
    (``ctx.output("evaluate").checkpoint``), never the JSON."""

    outcome: Outcome = "ok"
    summary: str = ""
    artifacts: dict[str, str] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)
    nodes: dict[str, str] = Field(default_factory=dict, description="graph node ids this step produced")
    details: dict[str, Any] = Field(default_factory=dict)
    needs: NeedsPerson | None = None

    @property
    def ran(self) -> bool:
        return self.outcome != "skipped"

    def artifact(self, key: str) -> Path:
        """The file or folder this step produced under ``key`` (``train``, ``eval``, ``checkpoint``, …)."""
        if key not in self.artifacts:
            raise LookupError(f"the step's output has no artifact {key!r} (it has {sorted(self.artifacts)})")
        return Path(self.artifacts[key])

    def node(self, key: str) -> str:
        """The graph node this step produced under ``key``."""
        if key not in self.nodes:
            raise LookupError(f"the step's output has no node {key!r} (it has {sorted(self.nodes)})")
        return self.nodes[key]

    @property
    def checkpoint(self) -> Path:
        """The weights this step trained, measured or judged."""
        return self.artifact("checkpoint")

    @property
    def tokenizer(self) -> Path:
        return self.artifact("tokenizer")

    @property
    def checkpoint_node(self) -> str:
        return self.node("checkpoint")

    @property
    def stage(self) -> str | None:
        """The curriculum stage this step's result is about (an eval's or a gate's), if any."""
        return self.details.get("stage")

    @property
    def stages(self) -> list[str]:
        """The stages a train step trained, in order."""
        return list(self.details.get("stages") or [])

    def headline(self) -> dict[str, Any]:
        """What a persona's model is shown of the output besides its numbers: the stage(s) and a gate's reasons."""
        return {k: self.details[k] for k in ("stage", "reasons", "stages") if k in self.details}

    def with_details(self, **extra: Any) -> StepResult:
        """A copy whose recorded output also holds ``extra`` (the persona that ran the step, its transcript)."""
        return self.model_copy(update={"details": {**self.details, **extra}})


class StepArgs(BaseModel):
    """A step's inputs as its workflow spec writes them (``inputs:`` in the YAML): which earlier step it reads and
    how. Read once, typed, where the spec is parsed; an unknown input is refused there, naming it."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)
    of: str | None = Field(None, description="the earlier step whose output this one reads (evaluate, gate, ...)")
    from_: str | None = Field(None, alias="from", description="the gate whose promoted checkpoint align starts from")
    stage: str | None = Field(None, description="the curriculum stage an evaluation scores (default: the last)")
    battery: BatterySpec | None = Field(None, description="a battery in place of the stage's own")
    final: bool = Field(False, description="the final gate: the model to be registered is judged")

    def given(self) -> dict[str, Any]:
        """The inputs the spec gave, as it wrote them (for a briefing or a transcript)."""
        return self.model_dump(mode="json", by_alias=True, exclude_defaults=True)


class StepInputs(BaseModel):
    """What people decided for this step visit, as its re-run reads it. Built only by ``after``."""

    model_config = ConfigDict(extra="forbid")
    restart: RestartPlan | None = Field(None, description="the spike restart proposal a person approved")
    accepted_stage_gates: dict[str, Decision] = Field(default_factory=dict, description="stage -> approval")
    accepted_gate: Decision | None = Field(None, description="the approval that accepted this gate's failure")
    kept_after_spike: dict[str, KeptWeights] = Field(
        default_factory=dict, description="stage -> the weights kept, with the approval"
    )
    budget_extended: bool = False
    accepted_curation: Decision | None = Field(
        None, description="the approval that accepted what curation left, over the max_drop_fraction"
    )
    before: Carried = Field(default_factory=Carried)

    def after(self, needs: NeedsPerson, decision: Decision | Mapping[str, Any]) -> StepInputs:
        """The inputs of the re-run once a person approved ``needs`` with ``decision``."""
        r, d = needs.resume, Decision.model_validate(decision)
        changed: dict[str, Any] = {"before": needs.carried or self.before}
        if r.kind == "restart" and r.restart is not None:
            changed["restart"] = r.restart
        elif r.kind == "accept_stage_gate" and r.stage is not None:
            changed["accepted_stage_gates"] = {**self.accepted_stage_gates, r.stage: d}
        elif r.kind == "keep_spiked" and r.stage is not None and r.keep is not None:
            kept = KeptWeights(**r.keep.model_dump(), approval=d)
            changed["kept_after_spike"] = {**self.kept_after_spike, r.stage: kept}
        elif r.kind == "extend_budget":
            changed["budget_extended"] = True
        elif r.kind == "accept_gate":
            changed = {"accepted_gate": d}
        elif r.kind == "accept_curation":
            changed = {"accepted_curation": d}
        else:  # conversation / go_ahead: the decision itself is the input
            changed = {}
        return self.model_copy(update=changed)


class WorkspaceLike(Protocol):
    """What a step uses of its workspace (``trainteam.workspace.Workspace``: the shell, above this layer)."""

    root: Path

    def dir(self, kind: str) -> Path: ...

    @property
    def graph(self) -> Any: ...

    @property
    def engine(self) -> Any: ...


@dataclass
class ToolContext:
    ws: WorkspaceLike
    run_id: str
    step: str
    visit: int
    persona: str
    task: TrainTask
    outputs: dict[str, StepResult] = field(default_factory=dict)  # earlier steps' results, by step name
    inputs: StepArgs = field(default_factory=StepArgs)  # the spec's step inputs (YAML), typed
    decided: StepInputs = field(default_factory=StepInputs)  # what people's decisions changed (typed)
    toolbox: Mapping[str, StepTool] = field(default_factory=dict)  # the workflow's step tools (its catalog)
    progress: bool = True
    spent_s: float | None = None  # wall seconds the run's steps took so far (the engine measures it)
    allowed_s: float | None = None  # what the run may spend in all: the budget plus extensions a person granted
    execution: str = ""  # the engine's name for this execution of the step (its DBOS step): a re-run after a
    # crash has the same name, so its agent run keeps the transcript segment (and graph facts) it began

    def __post_init__(self) -> None:
        # recorded JSON (a replay's transcript, a test's dict) becomes typed here; a StepResult stays as it is
        self.outputs = {name: StepResult.model_validate(out) for name, out in self.outputs.items()}
        self.inputs = StepArgs.model_validate(self.inputs)

    @property
    def graph(self) -> Any:  # the workspace's KnowledgeGraph: trainteam.graph, a room contract may not import
        return self.ws.graph

    @property
    def run_node(self) -> str:
        return f"Run:{self.run_id}"

    @property
    def step_node(self) -> str:
        return f"Step:{self.run_id}/{self.step}#{self.visit}"

    def output(self, step: str) -> StepResult:
        """The recorded output of an earlier step; a clear error if it did not run."""
        out = self.outputs.get(step)
        if out is None or not out.ran:
            raise LookupError(f"step {self.step!r} needs the output of step {step!r}, which did not run")
        return out

    def ran(self, step: str) -> StepResult | None:
        """The output of an earlier step if it ran (not skipped), else None."""
        out = self.outputs.get(step)
        return out if out is not None and out.ran else None

    def latest(self, *steps: str) -> StepResult:
        """The output of the last of ``steps`` that ran (e.g. sft after pretrain)."""
        for s in reversed(steps):
            out = self.outputs.get(s)
            if out is not None and out.ran:
                return out
        raise LookupError(f"step {self.step!r} needs one of {list(steps)} to have run")

    def outputs_json(self) -> dict[str, dict[str, Any]]:
        """Earlier steps' results as JSON (a transcript records them; a replay starts from them)."""
        return {name: out.model_dump(mode="json") for name, out in self.outputs.items()}


def budget_overrun(
    step: str,
    budget: BudgetSpec,
    allowed_s: float,
    evidence: dict[str, Any],
    carried: Carried | None = None,
    numbered: bool = True,
) -> NeedsPerson:
    """The one budget question: the run reached what it may spend (``allowed_s``: the budget plus what people
    granted) — before a step (the engine: ``evidence`` is what was spent, asked once per visit, ``numbered``
    False) or inside one (a step stopped at the ceiling: ``evidence`` is where). Approved, the same work goes
    on (from its checkpoint) under the extension the task allows (``budget.extension_minutes``)."""
    return NeedsPerson(
        action="exceed_budget",
        numbered=numbered,
        proposed={"continue_with": step, "extra_minutes": round(budget.extension_s() / 60, 2)},
        evidence={**evidence, "allowed_minutes": round(allowed_s / 60, 2), "budget": budget.model_dump()},
        resume=Resume(kind="extend_budget"),
        requested_by="ml_orchestrator",
        refused="more budget",
        carried=carried,
    )


class RunArgs(BaseModel):
    """Arguments of a tool that runs when called."""

    model_config = ConfigDict(extra="forbid")
    reason: str = Field(default="", max_length=500, description="why you call it (recorded with the call)")


class PlanFirstArgs(RunArgs):
    execute: bool = Field(default=False, description="false: return the plan only; true: do the work")


@dataclass(frozen=True)
class GateFacts:
    """What the judge's offline policy is told: the gate's bar and what was measured."""

    metric: str
    min: float
    measured: dict[str, float]


@dataclass(frozen=True)
class StepTool:
    """A step tool as the persona runtime registers it.

    ``run`` does the work; ``args`` is the argument model the model fills (default: the card
    decides RunArgs or PlanFirstArgs); ``prepare`` applies those arguments to the context
    (e.g. the engineer's per-stage overrides); ``plan`` is what a plan-first call returns;
    ``facts`` is what the offline policy may know of the step (the judge's gate bar);
    ``evidence`` is what a person sees, beside the plan, when a gated call of it waits (JSON)."""

    run: Callable[[ToolContext], StepResult]
    args: type[PlanFirstArgs] | None = None
    prepare: Callable[[ToolContext, Any], ToolContext] | None = None
    plan: Callable[[ToolContext, str], dict[str, Any]] | None = None
    facts: Callable[[ToolContext], GateFacts | None] | None = None
    evidence: Callable[[ToolContext], dict[str, Any]] | None = None
