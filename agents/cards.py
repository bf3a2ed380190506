"""Persona cards, skills and instruction templates (data in ``trainteam.prompts`` / ``trainteam.skills``).

A persona is defined by data, not code: its card says what it is for, which tools it
may use (least privilege: the Agent is built with exactly these), which tools are
plan-first or gated, and which skills it may load. Instructions are rendered from
Jinja2 templates with the task, the step, the budget and what the graph knows, so a
real model and the offline policy read the same brief.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache, lru_cache
from importlib import resources
from typing import Any, Literal

import jinja2
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from trainteam.contract.step_io import StepResult
from trainteam.core.errors import BadInput, format_validation_error
from trainteam.core.inputfiles import load_yaml

PERSONAS = ("data_curator", "training_engineer", "eval_judge", "ml_orchestrator")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ToolGrant(_Strict):
    """One tool a persona may call, with how it may be called."""

    name: str
    description: str = ""
    plan_first: bool = Field(default=False, description="returns a plan unless called with execute=true")
    requires_approval: bool = Field(default=False, description="executing it waits for a person")


class PersonaCard(_Strict):
    name: Literal["data_curator", "training_engineer", "eval_judge", "ml_orchestrator"]
    role: str
    goal: str
    model_role: str = Field(description="the model registry role this persona's model is bound to")
    template: str
    skills: list[str] = Field(default_factory=list)
    principles: list[str] = Field(default_factory=list)
    tools: list[ToolGrant] = Field(min_length=1)

    def grant(self, tool: str) -> ToolGrant | None:
        return next((t for t in self.tools if t.name == tool), None)

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]


class Skill(_Strict):
    name: str
    description: str
    load_when: list[Literal["always", "retry", "spike", "failure", "distributed", "local_data"]]
    text: str


@cache
def load_card(persona: str) -> PersonaCard:
    if persona not in PERSONAS:
        raise BadInput(f"persona: unknown persona {persona!r} (known: {', '.join(PERSONAS)})")
    ref = resources.files("trainteam.prompts").joinpath("personas", f"{persona}.yaml")
    try:
        return PersonaCard.model_validate(load_yaml(ref.read_text(), f"prompts/personas/{persona}.yaml"))
    except ValidationError as exc:  # a broken bundled card is a packaging bug, said plainly
        raise BadInput(format_validation_error(exc, f"prompts/personas/{persona}.yaml")) from None


@cache
def load_skill(name: str) -> Skill:
    ref = resources.files("trainteam.skills").joinpath(name, "SKILL.md")
    if not ref.is_file():
        raise BadInput(f"skills: no skill {name!r} (skills/{name}/SKILL.md)")
    text = ref.read_text()
    if not text.startswith("---"):
        raise BadInput(f"skills/{name}/SKILL.md: front matter (--- ... ---) is missing")
    _, front, body = text.split("---", 2)
    try:
        return Skill.model_validate({**(load_yaml(front, f"skills/{name}/SKILL.md") or {}), "text": body.strip()})
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, f"skills/{name}/SKILL.md")) from None


def task_conditions(
    task: Any, visit: int = 1, restarting: bool = False, outputs: Mapping[str, StepResult] | None = None
) -> set[str]:
    """Which ``load_when`` conditions hold for this task and step."""
    conds = {"always"}
    if visit > 1:
        conds.add("retry")
    if restarting:  # a person approved a spike restart: the troubleshooting skill applies
        conds.add("spike")
    if outputs and any(o.outcome in ("failed", "error", "spike") for o in outputs.values()):
        conds.add("failure")
    data = getattr(task, "data", None)
    if data is not None and getattr(data, "path", None) is not None:
        conds.add("local_data")
    for cfg in (getattr(task, "training", None) or {}).values():
        if cfg.num_nodes > 1 or cfg.devices_per_node > 1 or cfg.strategy != "single":
            conds.add("distributed")
    return conds


def skills_for(card: PersonaCard, conditions: set[str]) -> list[Skill]:
    """The card's skills whose trigger holds: a persona reads only what this task needs."""
    return [s for s in map(load_skill, card.skills) if conditions & set(s.load_when)]


def _template_source(name: str) -> str:
    ref = resources.files("trainteam.prompts").joinpath("templates", name)
    if not ref.is_file():
        raise jinja2.TemplateNotFound(name)
    return ref.read_text()


@lru_cache(maxsize=1)
def template_env() -> jinja2.Environment:
    # Instructions are plain text for a model, not HTML: no autoescape; StrictUndefined so a
    # template naming a missing variable fails in tests rather than rendering blanks.
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_template_source),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )


def render(template: str, **context: Any) -> str:
    return template_env().get_template(template).render(**context)
