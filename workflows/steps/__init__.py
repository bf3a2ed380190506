"""Typed tools: the only way a step (or a persona) touches data, training and the registry.

Each tool takes a ``ToolContext`` and a pydantic argument model and returns a
``StepResult``. The workflow engine calls them for steps; the personas' Agents
(issue 5) wrap the same functions, each persona getting only its own.
"""

from trainteam.agents.toolbox import StepResult, ToolContext
from trainteam.workflows.steps.catalog import TOOLS, get_tool

__all__ = ["StepResult", "TOOLS", "ToolContext", "get_tool"]
