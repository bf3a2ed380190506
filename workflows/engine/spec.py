"""Workflow specs: YAML → validated pydantic model → networkx DiGraph.

A spec names steps (persona, tool, inputs), edges (with an outcome condition) and
gates. Cycles are allowed only through edges leaving a gate step, and each such
edge carries a loop limit, so every run terminates.

Bounds, checked by ``workflows validate`` and before a run is stored (a spec over one is one line):
at most ``MAX_STEPS`` steps and ``MAX_EDGES`` edges; a loop edge taken at most ``MAX_LOOPS`` times,
and at most ``MAX_LOOPS_IN_ALL`` loop passes over all the spec's loop edges together (each pass
re-runs a gate's stage: training, evaluation, a person's approval). A run that needs more is
several runs: a retry policy is the judge's to propose, not a spec's to repeat unseen.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, Literal

import networkx as nx
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from trainteam.agents.cards import load_card
from trainteam.contract.step_io import StepArgs
from trainteam.core.errors import BadInput, format_validation_error
from trainteam.core.inputfiles import load_yaml, load_yaml_file

MAX_STEPS = 100
MAX_EDGES = 400
MAX_LOOPS = 10
MAX_LOOPS_IN_ALL = 30
PERSONAS = ("data_curator", "training_engineer", "eval_judge", "ml_orchestrator")
Persona = Literal["data_curator", "training_engineer", "eval_judge", "ml_orchestrator"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class StepSpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)
    persona: Persona
    tool: str
    inputs: StepArgs = Field(default_factory=StepArgs)
    gate: bool = Field(default=False, description="a gate step decides 'passed' or 'failed'")
    stage: list[str] | None = Field(default=None, description="skipped unless the task lists one of these stages")
    description: str = ""


class EdgeSpec(_Strict):
    source: str = Field(alias="from")
    target: str = Field(alias="to")
    when: str = Field(default="ok", description="the source step's outcome that takes this edge; '*' for any")
    max_loops: int | None = Field(
        default=None,
        ge=1,
        le=MAX_LOOPS,
        description=f"required on edges that close a cycle; at most {MAX_LOOPS} (and {MAX_LOOPS_IN_ALL} over the spec)",
    )

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class WorkflowSpec(_Strict):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$", max_length=64)
    version: int = Field(default=1, ge=1, le=1_000_000)
    description: str = ""
    start: str
    steps: list[StepSpec] = Field(min_length=1, max_length=MAX_STEPS, description=f"at most {MAX_STEPS}")
    edges: list[EdgeSpec] = Field(default_factory=list, max_length=MAX_EDGES, description=f"at most {MAX_EDGES}")

    @model_validator(mode="after")
    def _check_graph(self) -> WorkflowSpec:
        names = [s.name for s in self.steps]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"steps: duplicate step name(s) {sorted(dupes)}")
        known = set(names)
        if self.start not in known:
            raise ValueError(f"start: unknown step {self.start!r}")
        gates = {s.name for s in self.steps if s.gate}
        for i, e in enumerate(self.edges):
            for end, field in ((e.source, "from"), (e.target, "to")):
                if end not in known:
                    raise ValueError(f"edges[{i}].{field}: unknown step {end!r}")
            if e.max_loops is not None and e.source not in gates:
                raise ValueError(f"edges[{i}].max_loops: only edges leaving a gate step may loop")
        passes = sum(e.max_loops or 0 for e in self.edges)
        if passes > MAX_LOOPS_IN_ALL:
            raise ValueError(
                f"edges: the loop edges allow {passes} passes in all; at most {MAX_LOOPS_IN_ALL} "
                "(lower their max_loops)"
            )
        forward = nx.DiGraph()
        forward.add_nodes_from(names)  # spec order: error messages are deterministic
        forward.add_edges_from((e.source, e.target) for e in self.edges if e.max_loops is None)
        if not nx.is_directed_acyclic_graph(forward):
            cycle = nx.find_cycle(forward)
            path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
            raise ValueError(f"edges: cycle {path} does not pass through a gate edge with max_loops")
        unreachable = known - nx.descendants(self.graph(), self.start) - {self.start}
        if unreachable:
            raise ValueError(f"steps: unreachable from start: {sorted(unreachable)}")
        return self

    def applies(self, step: StepSpec, stages: list[str]) -> bool:
        return step.stage is None or any(s in stages for s in step.stage)

    def describe_steps(self, stages: list[str]) -> list[str]:
        """``name (persona)`` of each step a task with these stages runs, in order."""
        return [f"{s.name} ({s.persona})" for s in self.steps if self.applies(s, stages)]

    def step(self, name: str) -> StepSpec:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)

    def graph(self) -> nx.DiGraph:
        g = nx.DiGraph(name=self.name)
        for s in self.steps:
            g.add_node(s.name, persona=s.persona, tool=s.tool, gate=s.gate, stage=s.stage)
        for e in self.edges:
            g.add_edge(e.source, e.target, when=e.when, max_loops=e.max_loops)
        return g

    def next_step(self, current: str, outcome: str, loops_taken: dict[str, int]) -> tuple[str | None, str | None]:
        """The step after ``current`` given its outcome, and the loop-edge key used (if any).

        Edges are tried in spec order; a loop edge whose limit is used up is passed over.
        """
        for e in self.edges:
            if e.source != current or e.when not in (outcome, "*"):
                continue
            if e.max_loops is not None:
                key = f"{e.source}->{e.target}"
                if loops_taken.get(key, 0) >= e.max_loops:
                    continue
                return e.target, key
            return e.target, None
        return None, None

    def mermaid(self) -> str:
        lines = ["flowchart TD"]
        for s in self.steps:
            shape = ("{", "}") if s.gate else ("[", "]")
            label = f"{s.name}<br/><i>{s.persona}</i>" + (f"<br/>stage: {' | '.join(s.stage)}" if s.stage else "")
            lines.append(f'    {s.name}{shape[0]}"{label}"{shape[1]}')
        for e in self.edges:
            label = e.when if e.when != "ok" else ""
            if e.max_loops:
                label = f"{label} (max {e.max_loops}x)".strip()
            arrow = f"-->|{label}|" if label else "-->"
            style = "-.->" if e.max_loops else arrow
            if e.max_loops:
                style = f"-.->|{label}|"
            lines.append(f"    {e.source} {style} {e.target}")
        return "\n".join(lines)


def parse_spec(data: Any, source: str) -> WorkflowSpec:
    try:
        spec = WorkflowSpec.model_validate(data)
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, source)) from None
    check_tools(spec, source)
    return spec


def check_tools(spec: WorkflowSpec, source: str) -> None:
    """Each step's tool exists and is on its persona's card, as the run would find (the persona's Agent is
    built with exactly its card's tools, looked up in the step tools the engine was launched with). The tools
    that exist are the ones the cards name: the cards are data this module reads, the step catalog is code
    above the engine (``workflows/steps/``); a test holds the two to the same names."""
    known = sorted({name for persona in PERSONAS for name in load_card(persona).tool_names})
    for step in spec.steps:
        if step.tool not in known:
            raise BadInput(f"{source}: steps.{step.name}.tool: unknown tool {step.tool!r} (known: {', '.join(known)})")
        card = load_card(step.persona)
        if card.grant(step.tool) is None:
            raise BadInput(
                f"{source}: steps.{step.name}.tool: {step.tool!r} is not on the {step.persona} card "
                f"(its tools: {', '.join(card.tool_names)})"
            )


def load_spec_file(path: Path) -> WorkflowSpec:
    """A spec file, read with the bounds of ``trainteam.core.inputfiles`` (size, UTF-8, YAML limits)."""
    return parse_spec(load_yaml_file(path, "workflow spec"), str(path))


def builtin_names() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("trainteam.workflows").iterdir() if p.name.endswith(".yaml"))


def load_builtin(name: str) -> WorkflowSpec:
    """A bundled spec by name (``train_model``), or a path to a YAML file."""
    if name.endswith((".yaml", ".yml")) or "/" in name:
        return load_spec_file(Path(name))
    res = resources.files("trainteam.workflows").joinpath(f"{name}.yaml")
    if not res.is_file():
        raise BadInput(f"workflow: unknown workflow {name!r} (known: {', '.join(builtin_names())})")
    return parse_spec(load_yaml(res.read_text(), f"{name}.yaml"), f"{name}.yaml")
