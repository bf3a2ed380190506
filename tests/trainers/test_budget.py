"""The run's budget inside work: training saves and stops at the ceiling and resumes from there;
evaluation and generation stop between batches."""

from __future__ import annotations

import pytest

from trainteam.trainers import TrainConfig, budget, exact_match, train
from trainteam.trainers.eval_battery import greedy_generations


def _cfg(out):
    return TrainConfig(output_dir=out, max_steps=100000, per_device_batch_size=8, seq_len=32, save_steps=100000)


def test_training_saves_and_stops_at_the_ceiling_then_resumes_from_that_checkpoint(tmp_path, tiny, tok, arith):
    with budget.ceiling(2.0, 2.0) as limit:
        rep = train("sft", _cfg(tmp_path), tiny, arith[0], tokenizer=tok, progress=False)
        late = -limit.left_s()
    assert rep.stopped_reason == "budget" and 0 < rep.steps_done < 100000
    assert rep.final_dir == tmp_path / f"checkpoint-{rep.steps_done}"  # saved at the ceiling, not at save_steps
    assert (rep.final_dir / "model.safetensors").is_file()
    assert "eval_loss" not in rep.metrics  # no evaluation after the ceiling
    print(f"overrun past the ceiling: {late:.3f}s")

    with budget.ceiling(1.0, 3.0):
        more = train("sft", _cfg(tmp_path), tiny, arith[0], tokenizer=tok, progress=False)
    assert more.resumed_from == rep.final_dir and more.steps_done > rep.steps_done


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
