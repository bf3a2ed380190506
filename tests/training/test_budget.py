"""The run's budget inside work: training saves and stops at the ceiling and resumes from there;
evaluation and generation stop between batches."""

from __future__ import annotations

import pytest

from trainteam.core import clock
from trainteam.core.errors import BadInput
from trainteam.trainers import TrainConfig, exact_match, train
from trainteam.trainers.evaluation.battery import greedy_generations
from trainteam.trainers.training import budget


def _cfg(out):
    return TrainConfig(output_dir=out, max_steps=100000, per_device_batch_size=8, seq_len=32, save_steps=100000)


def test_training_saves_and_stops_at_the_ceiling_then_resumes_from_that_checkpoint(
    tmp_path, tiny, tok, arith, monkeypatch
):
    monkeypatch.setenv(clock.ENV, "0.125")  # the step clock: 2 s are 16 steps, however busy the machine is
    with budget.ceiling(2.0, 2.0) as limit:
        rep = train("sft", _cfg(tmp_path), tiny, arith[0], tokenizer=tok, progress=False)
        late = -limit.left_s()
    assert rep.stopped_reason == "budget" and rep.steps_done == 16 and late == 0.0
    assert rep.final_dir == tmp_path / "checkpoint-16"  # saved at the ceiling, not at save_steps
    assert (rep.final_dir / "model.safetensors").is_file()
    assert "eval_loss" not in rep.metrics  # no evaluation after the ceiling

    with budget.ceiling(1.0, 3.0):
        more = train("sft", _cfg(tmp_path), tiny, arith[0], tokenizer=tok, progress=False)
    assert more.resumed_from == rep.final_dir and more.steps_done == 24  # 8 more steps from the checkpoint


def test_on_the_wall_clock_training_stops_at_the_ceiling_too(tmp_path, tiny, tok, arith):
    with budget.ceiling(0.5, 0.5):  # at the ceiling whatever the machine's speed: before the first step or after
        rep = train("sft", _cfg(tmp_path), tiny, arith[0], tokenizer=tok, progress=False)
    assert rep.stopped_reason == "budget" and rep.steps_done < 100000


def test_the_step_clock_refuses_a_setting_that_is_not_a_positive_number(monkeypatch):
    for bad in ("soon", "0", "-1", "inf"):
        monkeypatch.setenv(clock.ENV, bad)
        with pytest.raises(BadInput, match=clock.ENV):
            clock.now()


def test_a_ceiling_already_past_stops_before_any_step(tmp_path, tiny, tok, arith):
    with budget.ceiling(-1.0, 0.0):
        rep = train("sft", _cfg(tmp_path), tiny, arith[0], tokenizer=tok, progress=False)
    assert rep.stopped_reason == "budget" and rep.steps_done <= 1


def test_evaluation_and_generation_stop_between_batches(tiny, tok, arith):
    _, ev = arith
    with budget.ceiling(0.0, 60.0), pytest.raises(budget.BudgetExceeded, match="evaluation") as stopped:
        exact_match(tiny, tok, ev, max_new_tokens=2, batch_size=4)
    assert stopped.value.late_s >= 0 and "may spend 60s" in str(stopped.value)
    with budget.ceiling(0.0, 60.0), pytest.raises(budget.BudgetExceeded, match="generation"):
        greedy_generations(tiny, tok, [r["prompt"] for r in ev], max_new_tokens=2, batch_size=4)
    with budget.ceiling(None):  # no ceiling: the same work runs to its end
        assert exact_match(tiny, tok, ev[:4], max_new_tokens=2, batch_size=4).n == 4
