"""One decision, taken by the persona's real model when one is configured, else by the offline policy.

``decide(persona, question, evidence, offline)`` is the seam every decision of a run goes through
(the recipe among the probes, the judge's diagnosis, an align stage's skip or continue). The caller
brings what its offline policy proposes (``offline``, a pydantic model) and, optionally, the rules that
bound any answer (``check(value) -> reason | None``: budget, gates, permissions). Then:

* no provider for the persona (``providers.choose_model(...).offline``) and no model bound to its role
  (``bound_models.active``: the binding its step resolved, served on 127.0.0.1): ``offline`` comes back
  at once; no Agent is built and no connection opened; a bound model's answer is ``by`` its model id;
* a provider: a pydantic-ai Agent with ``output_type=type(offline)`` reads the question, the evidence
  (JSON, redacted: no secret reaches the provider) and the offline proposal as the default, and
  answers with the same type. pydantic validates the answer, ``check`` bounds it (a refusal goes back
  to the model once as a retry, naming the reason). An answer that never fits, one still refused, a
  provider error or a timeout keeps ``offline``, with a one-line warning returned in
  ``Decided.warning`` and logged on ``trainteam.decisions``.

A setting that cannot work (an unknown provider, a missing key) is the person's input and raises
``BadInput`` like every persona step does; only the model's answer falls back.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python

from trainteam.agents.bound_models import active
from trainteam.agents.cards import load_card, render
from trainteam.agents.providers import (
    OFFLINE,
    build_model,
    choose_model,
    provider_errors,
    provider_failure,
    public_url,
)
from trainteam.contract.redaction import redact, redact_text, secret_values

T = TypeVar("T", bound=BaseModel)
log = logging.getLogger("trainteam.decisions")
TIMEOUT_S = 120.0  # a whole decision (every request and retry); a run never waits on a silent provider longer
OUTPUT_RETRIES = 1  # one more answer after a malformed or refused one, then the offline policy decides


@dataclass(frozen=True)
class Decided(Generic[T]):
    """The decision taken, who took it (``offline`` or the model id) and, when the model's answer was
    not used, why (``warning``)."""

    value: T
    by: str
    warning: str | None = None

    def evidence(self) -> dict[str, Any]:
        """What a Decision node or a step's details record about who decided (the value is the caller's)."""
        return {"decided_by": self.by, **({"warning": self.warning} if self.warning else {})}


def decide(
    persona: str,
    question: str,
    evidence: BaseModel | Mapping[str, Any],
    offline: T,
    *,
    check: Callable[[T], str | None] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Decided[T]:
    env = dict(os.environ if environ is None else environ)
    bound = active(persona, env)  # the persona's role binding its step resolved (agents/bound_models.py)
    choice = bound.choice if bound is not None else choose_model(persona, env)
    if choice.offline:
        return Decided(offline, OFFLINE, None)
    # build_model remembers the key: redaction below masks it wherever it appears
    model = bound.model() if bound is not None else build_model(choice, env)
    secrets = sorted(set(secret_values()) | set(secret_values(env)), key=len, reverse=True)
    refusals: list[str] = []
    agent = _agent(model, persona, type(offline), check, refusals)
    prompt = _prompt(question, evidence, offline, secrets)
    try:
        answer = _answer(agent, prompt)
    except provider_errors() as exc:
        problem = provider_failure(persona, exc, model, choice)
    except _run_errors() as exc:
        where = choice.model + (f" at {public_url(choice.base_url)}" if choice.base_url else "")
        problem = f"{persona}: {where}: {_misfit(exc, refusals, type(offline))}"
    else:
        by = bound.model_id if bound is not None else choice.model
        log.info("%s: %s decided by %s", persona, _label(question), by)
        return Decided(answer, by, None)
    warning = redact_text(f"{problem}; kept the offline policy's decision ({_label(question)})", secrets)
    log.warning(warning)
    return Decided(offline, OFFLINE, warning)


def _answer(agent: Any, prompt: str) -> Any:
    """The model's answer, asked from a thread of its own: every caller is a step tool running inside the
    persona's own Agent run, where pydantic-ai refuses a nested ``run_sync`` (``UserError``: cannot be used
    inside a synchronous tool); a fresh thread starts with a fresh context, outside that run."""
    with ThreadPoolExecutor(1, thread_name_prefix="decision") as pool:
        return pool.submit(agent.run_sync, prompt, timeout=TIMEOUT_S).result().output


def _agent(model: Any, persona: str, output: type[BaseModel], check: Callable | None, refusals: list[str]) -> Any:
    from pydantic_ai import Agent, ModelRetry

    card = load_card(persona)
    agent = Agent(
        model,
        name=f"{persona}_decision",
        output_type=output,
        retries=OUTPUT_RETRIES,
        instructions=render("decision.md.j2", persona=persona, role=card.role, goal=card.goal.strip()),
    )
    if check is not None:

        @agent.output_validator
        def _bounded(value: BaseModel) -> BaseModel:
            reason = check(value)
            if reason:
                refusals.append(reason)
                raise ModelRetry(f"refused: {reason}")
            return value

    return agent


def _prompt(question: str, evidence: BaseModel | Mapping[str, Any], offline: BaseModel, secrets: list[str]) -> str:
    facts = evidence.model_dump(mode="json") if isinstance(evidence, BaseModel) else to_jsonable_python(dict(evidence))
    shown = redact({"question": question, "evidence": facts, "default": offline.model_dump(mode="json")}, secrets)
    return (
        f"Question: {shown['question']}\n\nEvidence (JSON):\n{json.dumps(shown['evidence'], indent=1)}\n\n"
        f"Default (the offline policy's decision, JSON):\n{json.dumps(shown['default'], indent=1)}\n"
    )


def _run_errors() -> tuple[type[BaseException], ...]:
    from pydantic_ai.exceptions import AgentRunError

    return (AgentRunError,)  # a misbehaving model (UnexpectedModelBehavior), a timeout, a usage limit


def _misfit(exc: BaseException, refusals: list[str], output: type[BaseModel]) -> str:
    """Why the model's answer was not used, in one line."""
    if refusals:
        return f"answer refused: {refusals[-1]}"
    cause = exc.__cause__
    if isinstance(cause, ValidationError) and cause.errors():
        first = cause.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or output.__name__
        return f"answer is not a valid {output.__name__} ({where}: {first['msg']})"
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"no valid {output.__name__} answer ({message.splitlines()[0]})"


def _label(question: str) -> str:
    line = question.strip().splitlines()[0] if question.strip() else "decision"
    return line if len(line) <= 80 else line[:77] + "..."


__all__ = ["Decided", "decide"]
