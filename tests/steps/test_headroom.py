"""The align stage earns its cost: skipped when the stage before leaves no headroom on the gate metric."""

from __future__ import annotations

from types import SimpleNamespace

from trainteam.contract.step_io import StepResult
from trainteam.contract.train_task import TrainTask
from trainteam.workflows.steps.headroom import offline_choice

TASK = {
    "name": "t",
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2},
    "data": {"demo": "addition"},
    "stages": ["pretrain", "grpo"],
    "budget": {"max_wall_minutes": 5},
    "gates": {"grpo": {"metric": "exact_match", "max_regression": 0.0}},
}


def _choice(judged: dict, **task) -> object:
    ctx = SimpleNamespace(task=TrainTask.model_validate({**TASK, **task}))
    return offline_choice(ctx, "grpo", StepResult(details={"stage": "pretrain", "judged": judged}))


def test_a_perfect_stage_before_leaves_grpo_nothing_to_gain():
    skip = _choice({"exact_match": 1.0})
    assert not skip.run and "headroom 0.000 ≤ 0.01" in skip.reason and "pretrain left exact_match 1.000" in skip.reason
    assert not _choice({"exact_match": 0.995}).run
    assert _choice({"exact_match": 0.9}).run
    assert _choice({"exact_match": 1.0}, align_min_headroom=0.0).run is False  # 0: only a perfect score skips
    assert _choice({"exact_match": 0.99}, align_min_headroom=0.0).run


def test_a_metric_that_is_not_a_score_always_leaves_room():
    loss_gate = {"grpo": {"metric": "heldout_loss", "max_regression": 0.1}}
    assert _choice({"heldout_loss": 0.01}, gates=loss_gate).run
    assert _choice({}, gates={}).run  # nothing judged: the stage runs
