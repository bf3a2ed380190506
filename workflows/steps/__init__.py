"""The step tools: the only way a step (or a persona) touches data, training and the registry.

Each tool takes a ``ToolContext`` and returns a ``StepResult`` (``trainteam/contract/step_io.py``). The
engine hands the catalog (``STEPS``) to the persona runtime, which registers each persona's
own tools with its Agent.
"""

from trainteam.workflows.steps.catalog import STEPS, get_tool

__all__ = ["STEPS", "get_tool"]
