"""A persona's model, from the settings or from the registry: the seam that serves a bound model.

``trainteam models bind MODEL --role persona:training_engineer`` tags a registered model with the
role ``persona:<name>`` (``trainers/serving/registry.py``); ``ModelRegistry.pick_for_role`` is what selects
it here. Which model a persona gets, first match wins:

1. ``TRAINTEAM_MODEL_<PERSONA>`` (with ``TRAINTEAM_MODEL_BASE_URL_<PERSONA>``): the person's explicit
   setting for this persona, ``offline`` included (``providers.choose_model``);
2. the role binding ``persona:<name>`` in the workspace's registry;
3. ``TRAINTEAM_MODEL``, the setting for every persona;
4. the offline policy.

A bound model is served by the project's own OpenAI-compatible server (``trainers/serving/endpoint.py``):
the first persona that needs it starts one ``ChatServer`` on 127.0.0.1 (a free port, a bearer key of
this process) and every later step of this process reuses it; pydantic-ai's ``OpenAIChatModel``
talks to it. What it decides is attributed to the registered model id: the transcript's ``model``,
the ``model`` of its tool-call and decision nodes, and their ``decided_by`` edge to the Model node.
``decisions.decide`` (which has no workspace) uses the binding the persona's step resolved last in
this process (``active``). ``models unbind`` frees the role: the next step runs offline again.
"""

from __future__ import annotations

import os
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from trainteam.agents.cards import PERSONAS
from trainteam.agents.providers import ModelChoice, build_model, choose_model
from trainteam.contract.redaction import remember
from trainteam.core.db import utcnow
from trainteam.core.errors import BadInput, NotFound
from trainteam.graph.record import record_binding, record_bound_use, record_model
from trainteam.trainers.serving.endpoint import ChatModel, ChatServer
from trainteam.trainers.serving.registry import ModelRecord, ModelRegistry

_LOCK = threading.Lock()
_SERVERS: dict[str, tuple[ChatServer, str]] = {}  # model id -> (its started server, its bearer key)
_ACTIVE: dict[str, BoundModel] = {}  # persona -> the binding its last step resolved in this process


def persona_role(persona: str) -> str:
    return f"persona:{persona}"


def _persona_of(role: str) -> str | None:
    """The persona a ``persona:<name>`` role names (checked against the cards); None for other roles."""
    if not role.startswith("persona:"):
        return None
    name = role.split(":", 1)[1]
    if name not in PERSONAS:
        raise BadInput(f"--role: unknown persona {name!r} in {role!r} (known: {', '.join(PERSONAS)})")
    return name


def record_registered_model(g, rec: ModelRecord) -> None:
    """The Model node of a registry record (a no-op once recorded)."""
    record_model(
        g,
        rec.id,
        name=rec.name,
        path=rec.path,
        stage=rec.stage,
        base=rec.base,
        metrics=rec.metrics,
        content_hash=rec.content_hash,
        run_id=rec.lineage.get("run_id"),
    )


def bind_role(ws, role: str, model: str, *, by: str | None, prompt: str = "full") -> ModelRecord:
    """``models bind``: point ``role`` at ``model``; a persona's binding is recorded in the graph.
    ``prompt`` compact: the persona asks it with the compact prompt (``agents/compact.py``)."""
    persona = _persona_of(role)
    if prompt != "full" and persona is None:
        raise BadInput(f"--prompt: {prompt} applies to a persona:NAME role, not {role!r}")
    rec = ModelRegistry.of(ws).bind(role, model, by=by, prompt=prompt)
    if persona is not None:
        record_registered_model(ws.graph, rec)
        record_binding(ws.graph, rec.id, persona=persona, role=role, action="bind", by=by, at=utcnow())
    return rec


def unbind_role(ws, role: str, *, by: str | None) -> str | None:
    """``models unbind``: free ``role`` (the persona runs offline again); recorded for a persona."""
    persona = _persona_of(role)
    was = ModelRegistry.of(ws).unbind(role)
    if persona is not None and was is not None:
        record_binding(ws.graph, was, persona=persona, role=role, action="unbind", by=by, at=utcnow())
    return was


@dataclass(frozen=True)
class BoundModel:
    """A registered model serving a persona, at its local server."""

    persona: str
    model_id: str
    name: str
    base_url: str
    api_key: str
    prompt: str = "full"  # how the persona asks it: full, or compact (agents/compact.py)

    @property
    def choice(self) -> ModelChoice:
        """What provider messages name (``openai:<id> at http://127.0.0.1:PORT/v1``)."""
        return ModelChoice(
            persona=self.persona,
            model=f"openai:{self.model_id}",
            base_url=self.base_url,
            source=f"binding {persona_role(self.persona)}",
        )

    def model(self) -> Any:
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        return OpenAIChatModel(self.model_id, provider=OpenAIProvider(base_url=self.base_url, api_key=self.api_key))


@dataclass(frozen=True)
class PersonaModel:
    """The model a persona runs on: ``model`` None is the offline policy. ``label`` is what records say
    decided (the registered model id when bound); ``choice`` names it in provider failures."""

    model: Any
    label: str
    choice: ModelChoice | None = None
    bound: BoundModel | None = None


def _explicit(persona: str, env: Mapping[str, str]) -> bool:
    return bool(env.get(f"TRAINTEAM_MODEL_{persona.upper()}"))


def serve_bound(persona: str, rec: ModelRecord, prompt: str = "full") -> BoundModel:
    """The bound model's local server: started once per process, then reused."""
    with _LOCK:
        if rec.id not in _SERVERS:
            key = secrets.token_urlsafe(24)
            remember(key)  # masked wherever it could show up
            server = ChatServer(ChatModel(rec.path, rec.id, max_new_tokens=256), port=0, api_key=key).start()
            _SERVERS[rec.id] = (server, key)
        server, key = _SERVERS[rec.id]
    return BoundModel(
        persona=persona, model_id=rec.id, name=rec.name, base_url=server.base_url, api_key=key, prompt=prompt
    )


def bound_model(ws, persona: str) -> BoundModel | None:
    """The model bound to ``persona:<name>`` in the workspace's registry, served; None when unbound.
    The binding is recorded in the graph (the Model node ``bound_to`` the Persona)."""
    registry = ModelRegistry.of(ws)
    try:
        rec = registry.pick_for_role(persona_role(persona))
    except NotFound:
        return None
    record_registered_model(ws.graph, rec)
    record_bound_use(ws.graph, rec.id, persona=persona, role=persona_role(persona))
    return serve_bound(persona, rec, registry.role_prompt(persona_role(persona)))


def persona_model(ws, persona: str, environ: Mapping[str, str] | None = None) -> PersonaModel:
    """The model ``persona`` runs on in ``ws``, by the precedence above (the module's docstring)."""
    env = os.environ if environ is None else environ
    if not _explicit(persona, env):
        bound = bound_model(ws, persona)
        with _LOCK:
            _ACTIVE.pop(persona, None) if bound is None else _ACTIVE.__setitem__(persona, bound)
        if bound is not None:
            return PersonaModel(bound.model(), bound.model_id, bound.choice, bound)
    choice = choose_model(persona, dict(env))
    if choice.offline:
        return PersonaModel(None, "offline")
    return PersonaModel(build_model(choice, dict(env)), choice.describe(), choice)


def active(persona: str, environ: Mapping[str, str] | None = None) -> BoundModel | None:
    """The binding this process's last step of ``persona`` resolved, unless an explicit setting wins."""
    env = os.environ if environ is None else environ
    if _explicit(persona, env):
        return None
    with _LOCK:
        return _ACTIVE.get(persona)
