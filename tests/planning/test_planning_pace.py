"""A run measures its own first steps against the planner's estimate and re-plans aloud (issue 31). The
Trainer's state, the load and the cache entry are given by hand: nothing here depends on this machine's speed."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainteam.trainers.planning import pace
from trainteam.trainers.planning.calibrate import Calibration, _store, cached, shape_key
from trainteam.trainers.planning.estimate import ModelShape
from trainteam.trainers.planning.load import Load
from trainteam.trainers.training import budget
from trainteam.trainers.training.config import ModelSpec, TrainConfig

TINY = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=64, vocab_size=300)
SHAPE = ModelShape.from_spec(TINY)
CFG = TrainConfig(per_device_batch_size=8, seq_len=64, threads=1)
BUSY = Load(neighbours=1.9, share=0.25, threads=1, cores=2)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINTEAM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(pace, "during", lambda mark, threads: BUSY)  # the load the run met
    return tmp_path / "cache" / "calibration"


def _run_to_step_5():
    """Steps 2-5 of a run: 4 steps of 0.5 s, 8 rows of 40 tokens each (640 tokens/s); 95 steps left."""
    start = {"step": 1, "tokens": 320, "step_time": 2.0, "mark": (0.0, 0.0, 0.0)}
    state = SimpleNamespace(global_step=5, num_input_tokens_seen=320 + 4 * 320, max_steps=100)
    return start, state


def test_a_stored_estimate_far_from_the_runs_pace_is_re_planned_and_replaced(cache):
    key = shape_key(SHAPE.signature(), CFG, 320, device="cpu")
    _store(
        key,
        Calibration(
            tokens_per_s=38.0,
            step_s=256 / 38,
            tokens_per_step=256,
            steps=1,
            threads=1,
            device="cpu",
            model="random init",
            measured_at="2026-12-04T13:28:03+00:00",
            load=BUSY,
        ),
    )
    reading = pace.read_pace(*_run_to_step_5(), CFG, SHAPE, "cpu", threads=1)
    assert (reading.step_s, reading.tokens_per_s, reading.micro_batch_tokens) == (0.5, 640.0, 320.0)
    assert reading.steps_left == 95 and reading.minutes_left == pytest.approx(95 * 0.5 / 60)
    assert reading.expected_tokens_per_s == 38.0 and reading.off_by == pytest.approx(640 / 38)
    line = reading.line()
    assert line.startswith(
        "pace: steps 2-5 ran 0.50 s a step (640 tokens/s at load 1.9 of 2 cores, 1 thread); "
        "the 95 steps left take ~0.8 min; the planner's estimate for this load was 38 tokens/s "
        "(measured 38 tokens/s on this machine at load 1.9 of 2 cores on 2026-12-04 13:28"
    )
    assert "): off x16.8; this pace replaces the stored calibration" in line
    now = cached(key)
    assert now.source == "run" and now.tokens_per_s == 640.0 and now.load == BUSY and now.steps == 4
    assert reading.numbers() == {
        "pace_step_s": 0.5,
        "pace_tokens_per_s": 640.0,
        "pace_minutes_left": 0.792,
        "pace_neighbours": 1.9,
        "pace_expected_tokens_per_s": 38.0,
    }


def test_without_a_measurement_the_guess_is_compared_and_nothing_is_stored(cache):
    reading = pace.read_pace(*_run_to_step_5(), CFG, SHAPE, "cpu", threads=1)
    assert "a FLOP guess" in reading.expected_note and not reading.stored
    assert not cache.exists()  # validate measures; a run does not invent a calibration


def test_a_pace_the_budget_cannot_hold_says_where_the_ceiling_stops_it(cache):
    with budget.ceiling(10.0, 60.0):
        reading = pace.read_pace(*_run_to_step_5(), CFG, SHAPE, "cpu", threads=1)
    assert reading.ceiling_step in (24, 25)  # 10 s left at 0.5 s a step, from step 5
    assert reading.line().endswith(
        f"the budget's ceiling stops training near step {reading.ceiling_step} with a "
        "checkpoint saved, and a person decides whether it goes on"
    )


def test_a_dpo_run_reports_its_pace_but_does_not_stand_in_for_a_calibration(cache):
    dpo = CFG.model_copy(update={"method": "dpo"})
    key = shape_key(SHAPE.signature(), dpo, 320, device="cpu")
    stored = Calibration(
        tokens_per_s=38.0,
        step_s=256 / 38,
        tokens_per_step=256,
        steps=1,
        threads=1,
        device="cpu",
        model="random init",
        measured_at="2026-12-04T13:28:03+00:00",
        load=BUSY,
    )
    _store(key, stored)
    reading = pace.read_pace(*_run_to_step_5(), dpo, SHAPE, "cpu", threads=1)
    assert reading.off_by == pytest.approx(640 / 38) and not reading.stored and cached(key) == stored
    grpo = pace.read_pace(*_run_to_step_5(), CFG.model_copy(update={"method": "grpo"}), SHAPE, "cpu", threads=1)
    assert grpo.expected_tokens_per_s is None and "planner's estimate" not in grpo.line()
