"""The persona runtime on pydantic-ai (issue 5).

``run_persona_step`` / ``resume_persona_step`` run one workflow step as its persona.
Imported lazily: ``import
trainteam.agents`` stays cheap for short CLI commands.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "run_persona_step": "trainteam.agents.runtime",
    "resume_persona_step": "trainteam.agents.runtime",
    "load_card": "trainteam.agents.cards",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'trainteam.agents' has no attribute {name!r}")
