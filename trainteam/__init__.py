"""trainteam: LLM training run by a team of AI agents under human oversight.

The public API resolves lazily, so ``import trainteam`` stays cheap for short commands.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "Workspace": "trainteam.workspace",
    "Settings": "trainteam.settings",
    "TrainTask": "trainteam.contract.train_task",
    "execute_workflow": "trainteam.api",
    "submit": "trainteam.api",
    "resume_run": "trainteam.api",
    "get_run": "trainteam.api",
    "list_approvals": "trainteam.api",
    "approve": "trainteam.api",
    "reject": "trainteam.api",
    "graph_orchestrate": "trainteam.api",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'trainteam' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
