"""The training engineer's refusal of a plan over the budget names what to change and how the estimate was
made (issue 31: "the planner estimates 93.6 min, over the 20.0 min left of 20 min budget" said neither)."""

from __future__ import annotations

import pytest
from persona_helpers import ctx, task

from trainteam.agents.runtime import run_persona_step
from trainteam.workspace import Workspace


@pytest.fixture
def ws(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINTEAM_CACHE_DIR", str(tmp_path / "cache"))  # nothing measured: the FLOP guess
    return Workspace.open(tmp_path / "ws")


def test_a_plan_over_the_budget_says_what_to_change_and_how_it_was_estimated(ws):
    t = task(budget={"max_wall_minutes": 0.001}, training={"pretrain": {"max_steps": 5000, "seq_len": 64}})
    result = run_persona_step(ctx(ws, "training_engineer", "train", t), "train")
    assert result.outcome == "error" and "over the 0.001 min budget: raise budget.max_wall_minutes to at least " \
        in result.summary
    assert "; the estimate: pretrain: a FLOP guess: " in result.summary
    assert "nothing measured for this model on this machine (trainteam validate measures it)" in result.summary
