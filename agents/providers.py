"""Which model each persona talks to: settings only, never arguments.

``TRAINTEAM_MODEL_<PERSONA>`` (e.g. ``TRAINTEAM_MODEL_EVAL_JUDGE``) wins over
``TRAINTEAM_MODEL``; unset or ``offline`` means the built-in deterministic offline
policy. A value is a pydantic-ai model id (``openai:gpt-4o``, ``anthropic:…``,
``ollama:…``). With ``TRAINTEAM_MODEL_BASE_URL[_<PERSONA>]`` an ``openai:NAME`` model
talks to any OpenAI-compatible server (vLLM, Ollama, a served trainteam model). A registered model
bound to the role ``persona:<name>`` (``trainteam models bind``) comes between the persona's own
setting and ``TRAINTEAM_MODEL``: ``agents/bound_models.py`` holds that order.

Secrets come from the environment (``TRAINTEAM_MODEL_API_KEY[_<PERSONA>]``, or the
provider's own variable such as ``OPENAI_API_KEY``) or from the system keyring
(service ``trainteam``, user = persona or ``default``) when ``keyring`` is installed.
They are handed to the provider object and never written anywhere.
"""

from __future__ import annotations

import os
import socket
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from trainteam.contract.redaction import KEYRING_SERVICE, redact_text, remember
from trainteam.core.errors import BadInput

OFFLINE = "offline"


@dataclass(frozen=True)
class ModelChoice:
    """What the settings say for one persona (no secret in here: safe to print and record)."""

    persona: str
    model: str = OFFLINE
    base_url: str | None = None
    source: str = "default"

    @property
    def offline(self) -> bool:
        return self.model == OFFLINE

    def describe(self) -> str:
        return self.model + (f" @ {public_url(self.base_url)}" if self.base_url else "")


def public_url(url: str | None) -> str | None:
    """A URL fit to print: without the user:password a base URL may carry, and its trailing slash."""
    if not url:
        return url
    parts = urlsplit(str(url))
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=host)).rstrip("/")


def _env(name: str, persona: str, environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    specific = f"{name}_{persona.upper()}"
    if environ.get(specific):
        return environ[specific], specific
    if environ.get(name):
        return environ[name], name
    return None, None


def choose_model(persona: str, environ: dict[str, str] | None = None) -> ModelChoice:
    env = os.environ if environ is None else environ
    model, source = _env("TRAINTEAM_MODEL", persona, env)
    base_url, _ = _env("TRAINTEAM_MODEL_BASE_URL", persona, env)
    if model is None:
        return ModelChoice(persona=persona, base_url=None)
    model = model.strip()
    if model != OFFLINE and ":" not in model:
        raise BadInput(f"{source}: {model!r} is not a model id like 'openai:NAME' (or 'offline')")
    return ModelChoice(persona=persona, model=model, base_url=base_url, source=source or "default")


def _api_key(persona: str, environ: Mapping[str, str]) -> str | None:
    key, _ = _env("TRAINTEAM_MODEL_API_KEY", persona, environ)
    if not key:
        key = _keyring_key(persona)
    remember(key)  # whatever a provider may echo back of it is masked before it is stored or printed
    return key


def _keyring_key(persona: str) -> str | None:
    try:
        import keyring  # optional: only when installed
    except ImportError:
        return None
    try:
        return keyring.get_password(KEYRING_SERVICE, persona) or keyring.get_password(KEYRING_SERVICE, "default")
    except Exception:  # a locked or absent keyring backend means "no key here", not a crash
        return None


def build_model(choice: ModelChoice, environ: dict[str, str] | None = None) -> Any:
    """A pydantic-ai Model for a non-offline choice; a setting that cannot work is one line naming it."""
    from pydantic_ai.exceptions import UserError

    try:
        return _build(choice, os.environ if environ is None else environ)
    except (ImportError, UserError) as exc:
        first = str(exc).split(". ")[0].split(" — ")[0].splitlines()[0]
        raise BadInput(f"{choice.source}: {choice.model}: {first}") from None


def _build(choice: ModelChoice, env: Mapping[str, str]) -> Any:
    provider_name, _, name = choice.model.partition(":")
    key = _api_key(choice.persona, env)
    if choice.base_url is not None:
        if provider_name not in ("openai", "vllm", "ollama", "openai-compatible"):
            raise BadInput(
                f"TRAINTEAM_MODEL_BASE_URL: only OpenAI-compatible models take a base URL, not {provider_name!r}"
            )
        from pydantic_ai.models.openai import OpenAIChatModel
        from pydantic_ai.providers.openai import OpenAIProvider

        # Local servers (vLLM, Ollama) accept any key; the OpenAI client insists on one.
        return OpenAIChatModel(name, provider=OpenAIProvider(base_url=choice.base_url, api_key=key or "local"))
    from pydantic_ai.models import infer_model

    if key is None:
        return infer_model(choice.model)
    from pydantic_ai.providers import infer_provider_class

    # The concrete provider classes take api_key (the base class's signature does not say so).
    provider_class: Callable[..., Any] = infer_provider_class(provider_name)
    try:
        provider = provider_class(api_key=key)
    except TypeError:
        raise BadInput(f"TRAINTEAM_MODEL_API_KEY: provider {provider_name!r} does not take an api key") from None
    return infer_model(choice.model, provider_factory=lambda _name: provider)


PROBE_TIMEOUT_S = 5.0


def check_answers(choice: ModelChoice, model: Any) -> None:
    """The endpoint a persona's model talks to answers one HTTP request (``GET <base>/models``) within
    ``PROBE_TIMEOUT_S``; else one ``BadInput`` line naming the setting, the model, the public URL and what
    happened, so a run is refused at the door rather than failing at its first persona step. An HTTP status
    counts as an answer (whether the key or the model name is right is the provider's to say on the first
    real request), but a 404 at a base URL: every OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp,
    ``trainteam serve``) lists its models there, so the URL is not such an API's base (often a missing
    ``/v1``), and the first request would fail the same way. No key is sent and nothing of the response is
    kept. One GET needs no client library: the standard library's urllib (which honours the proxy settings
    as the providers' clients do)."""
    import urllib.error
    import urllib.request

    url = choice.base_url or _model_url(model)
    if not url:
        return
    probe = urllib.request.Request(str(url).rstrip("/") + "/models", method="GET")
    try:
        with urllib.request.urlopen(probe, timeout=PROBE_TIMEOUT_S):
            return
    except urllib.error.HTTPError as exc:
        if exc.code != HTTPStatus.NOT_FOUND or choice.base_url is None:
            return  # an HTTP status: something answers there
        why = "HTTP 404 (not found) for GET /models: not an OpenAI-compatible API's base URL (it often ends in /v1)"
        raise BadInput(_unanswered(choice, url, why, f"fix {_url_setting(choice)}")) from None
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        what = _what(reason) if isinstance(reason, BaseException) else f"cannot connect ({reason})"
        setting = _url_setting(choice) if choice.base_url else choice.source
        fix = f"start the server, or fix {setting}"
        raise BadInput(_unanswered(choice, url, f"{what}; nothing answers there", fix)) from None


def _url_setting(choice: ModelChoice) -> str:
    return _env("TRAINTEAM_MODEL_BASE_URL", choice.persona, os.environ)[1] or "TRAINTEAM_MODEL_BASE_URL"


def _unanswered(choice: ModelChoice, url: str, what: str, fix: str) -> str:
    return redact_text(f"{choice.source}: {choice.model} at {public_url(str(url))}: {what} ({fix})")


def _model_url(model: Any) -> str | None:
    try:
        url = getattr(model, "base_url", None)
    except Exception:  # a provider that cannot say where it talks to is not probed
        return None
    return str(url) if url else None


def provider_errors() -> tuple[type[BaseException], ...]:
    """What a failing provider raises: pydantic-ai's ModelAPIError family (HTTP status, connection,
    timeout), and the openai SDK's own errors should one ever escape unwrapped."""
    from pydantic_ai.exceptions import ModelAPIError

    try:
        from openai import APIError
    except ImportError:
        return (ModelAPIError,)
    return (ModelAPIError, APIError)


def provider_failure(persona: str, exc: BaseException, model: Any = None, choice: ModelChoice | None = None) -> str:
    """One line for a provider that failed: the persona, the model, its URL and what happened, e.g.
    ``eval_judge: openai:gpt-x at http://127.0.0.1:8000/v1: HTTP 401 (unauthorized)``. Never the request,
    the response body or the traceback: a 401 often echoes the very key it refused."""
    return redact_text(f"{persona}: {_where(model, choice)}: {_what(exc)}")


def _where(model: Any, choice: ModelChoice | None) -> str:
    if choice is not None and not choice.offline:
        name, url = choice.model, choice.base_url
    else:
        name, url = f"{getattr(model, 'system', None) or 'model'}:{getattr(model, 'model_name', '?')}", None
    if url is None:
        try:
            url = getattr(model, "base_url", None)
        except Exception:  # a provider that cannot say where it talks to
            url = None
    return f"{name} at {public_url(url)}" if url else name


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        chain.append(cur)
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    return chain


def _what(exc: BaseException) -> str:
    status = getattr(exc, "status_code", None)
    if isinstance(status, int):
        try:
            return f"HTTP {status} ({HTTPStatus(status).phrase.lower()})"
        except ValueError:
            return f"HTTP {status}"
    timeout = getattr(exc, "timeout", None)
    if timeout is not None and isinstance(timeout, (int, float)):
        return f"no answer within {timeout:g} s"
    chain = _causes(exc)
    kinds = tuple(type(c).__name__ for c in chain)
    if any(isinstance(c, ConnectionRefusedError) for c in chain):
        return "cannot connect (connection refused)"
    if any(isinstance(c, socket.gaierror) for c in chain):
        return "cannot connect (unknown host)"
    if any(isinstance(c, ssl.SSLError) for c in chain):
        return "cannot connect (TLS failed)"
    if any(isinstance(c, TimeoutError) or "Timeout" in k for c, k in zip(chain, kinds, strict=True)):
        return "timed out"
    if any("Connection" in k for k in kinds):
        return "connection lost" if getattr(exc, "phase", None) == "read" else "cannot connect"
    return f"failed ({type(exc).__name__})"
