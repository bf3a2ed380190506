"""Run planning: accounting, memory and cost, refusals with reasons, strategy choice. No torch.

The launch side (accelerate configs, command lines) is ``trainteam.trainers.launch.node_commands``.
"""

from trainteam.trainers.planning.estimate import MemoryEstimate, ModelShape
from trainteam.trainers.planning.hardware import HardwareSpec, detect_hardware
from trainteam.trainers.planning.planner import (
    CostEstimate,
    PlanRefused,
    Refusal,
    RunPlan,
    check,
    plan,
    recommend,
)

__all__ = [
    "CostEstimate",
    "HardwareSpec",
    "MemoryEstimate",
    "ModelShape",
    "PlanRefused",
    "Refusal",
    "RunPlan",
    "check",
    "detect_hardware",
    "plan",
    "recommend",
]
