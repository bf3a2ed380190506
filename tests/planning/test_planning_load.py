"""A throughput measurement is only as good as the load it was taken under (issue 31): a calibration timed
while another job kept the cores busy said 9 tokens/s, and every later plan of the idle machine believed it.
These tests write cache entries by hand and inject the load: nothing here depends on this machine's speed."""

from __future__ import annotations

import json
import math

import pytest
from instruction_rows import as_chat, instruction_rows

from trainteam.contract.train_task import TrainTask
from trainteam.trainers.planning import HardwareSpec
from trainteam.trainers.planning import calibrate as cal_module
from trainteam.trainers.planning.advice import over_budget
from trainteam.trainers.planning.calibrate import (
    Calibration,
    cache_key,
    cached,
    calibrate,
    lookup,
    remeasuring,
    step_tokens,
)
from trainteam.trainers.planning.load import Load, cores_for, speed_ratio, threads_under
from trainteam.trainers.training.config import ModelSpec, TrainConfig
from trainteam.workflows.task.preflight import refusal_line
from trainteam.workflows.task.stage_plan import calibration_tokens, data_tokens, plan_stage

TINY = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=64, vocab_size=300)
CPU1 = HardwareSpec(device="cpu", device_memory_gib=16, peak_tflops=0.08)
BUSY = Load(neighbours=1.9, share=0.25, threads=1, cores=2, load1=7.1)  # two other jobs on the 2 cores
IDLE = Load(neighbours=0.0, share=1.0, threads=1, cores=2, load1=0.1)  # a probe thread got a whole core
WHEN = "2026-12-04T13:28:03+00:00"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINTEAM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TRAINTEAM_THREADS", raising=False)
    return tmp_path / "cache" / "calibration"


def _write(spec: ModelSpec, cfg: TrainConfig, tokens: float, **fields) -> Calibration:
    """A cache entry written by hand, as a calibration under ``load`` would have stored it."""
    n = step_tokens(tokens)
    entry = Calibration(
        **{
            "tokens_per_s": 38.0,
            "step_s": n / 38.0,
            "tokens_per_step": n,
            "steps": 1,
            "threads": 1,
            "device": "cpu",
            "model": str(spec.path or "random init"),
            "measured_at": WHEN,
            "load": BUSY,
            **fields,
        }
    )
    cal_module._store(cache_key(spec, cfg, tokens, device="cpu", vocab_size=spec.vocab_size), entry)
    return entry


def test_the_cores_a_run_would_get_follow_the_load():
    assert threads_under(IDLE, None) == 2 and cores_for(IDLE, 2) == 2.0  # idle: both cores
    one_busy = Load(neighbours=1.0, share=1.0, threads=1, cores=2)
    assert threads_under(one_busy, None) == 1 and cores_for(one_busy, 1) == 1.0  # the free core
    assert cores_for(one_busy, 2) == 1.0  # a second thread finds no free core
    assert threads_under(BUSY, 2) == 2  # a fixed count is kept
    # a measurement on 1 thread at a quarter core, read for the idle machine: that thread's whole core, 1 / 0.25;
    # the run's second thread is not counted on until it is measured
    assert speed_ratio(BUSY, 1, IDLE, 2) == pytest.approx(4.0) == speed_ratio(BUSY, 1, IDLE, 1)
    # measured on 2 idle threads (1.9 cores), read for 1 thread beside a busy neighbour: the most 2 threads make
    assert speed_ratio(Load(neighbours=0.0, share=1.9, threads=2, cores=2), 2, one_busy, 1) == pytest.approx(
        1.0 / (1.9 * 0.95)
    )


def test_a_calibration_taken_under_load_is_scaled_on_an_idle_machine(cache):
    cfg = TrainConfig(per_device_batch_size=4, seq_len=32)
    stored = _write(TINY, cfg, 128)
    assert lookup(TINY, cfg, 128, device="cpu", now=BUSY) == stored  # the same load now: as stored
    idle = lookup(TINY, cfg, 128, device="cpu", now=IDLE)
    assert idle.tokens_per_s == pytest.approx(38.0 * 4) and idle.step_s == pytest.approx(stored.step_s / 4)
    assert idle.measured_tokens_per_s == 38.0
    how = idle.describe()
    assert how == (
        "measured 38 tokens/s on this machine at load 1.9 of 2 cores on 2026-12-04 13:28 (1 step of 128 "
        "tokens, 1 thread); scaled x4.00 to the load 0.0 of 2 cores now (1 thread would get 1.00 cores, it "
        "got 0.25; the run's other 1 not counted until measured): 152 tokens/s"
    )
    assert cached(cache_key(TINY, cfg, 128, device="cpu", vocab_size=300)) == stored  # the file is not rewritten


def test_a_stalled_multithread_measurement_is_not_trusted_elsewhere(cache):
    """Two threads beside a busy neighbour stall at every barrier: that speed per core is not the machine's."""
    cfg = TrainConfig(per_device_batch_size=4, seq_len=32)
    stored = _write(TINY, cfg, 128, threads=2, load=Load(neighbours=1.0, share=1.6, threads=2, cores=2))
    assert lookup(TINY, cfg, 128, device="cpu", now=IDLE) is None  # the FLOP guess, not a stalled number
    assert lookup(TINY, cfg.model_copy(update={"threads": 2}), 128, device="cpu", now=stored.load) == stored


def test_a_measurement_without_its_load_is_not_trusted(cache):
    cfg = TrainConfig(per_device_batch_size=4, seq_len=32)
    _write(TINY, cfg, 128, load=None)
    assert lookup(TINY, cfg, 128, device="cpu", now=BUSY) is None


def test_validate_measures_again_when_the_load_differs(cache):
    cfg = TrainConfig(per_device_batch_size=4, seq_len=32, threads=1)
    stored = _write(TINY, cfg, 128)
    assert calibrate(TINY, cfg, 128, device="cpu", now=BUSY) == stored  # same load: read back, not measured
    fresh = calibrate(TINY, cfg, 128, device="cpu", now=IDLE, min_seconds=0.05)
    assert fresh.measured_at != WHEN and fresh.source == "calibration" and fresh.load is not None
    assert fresh.note == (
        "retaken: the stored 38 tokens/s was measured at load 1.9 of 2 cores, the load 0.0 of 2 cores now"
    )
    kept = cached(cache_key(TINY, cfg, 128, device="cpu", vocab_size=300))
    assert kept.tokens_per_s == fresh.tokens_per_s and kept.load == fresh.load and kept.note is None
    with remeasuring():  # validate --remeasure: whatever is stored
        again = calibrate(TINY, cfg, 128, device="cpu", now=kept.load, min_seconds=0.05)
    assert again.note.startswith("retaken as asked") and again.measured_at >= fresh.measured_at


def _chat_task(tmp_path, real_model, training: dict, minutes: float = 10) -> TrainTask:
    rows = as_chat(instruction_rows(40))
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return TrainTask.model_validate(
        {
            "name": "chat",
            "model": {"path": str(real_model)},
            "stages": ["sft"],
            "data": {"path": str(tmp_path / "train.jsonl")},
            "budget": {"max_wall_minutes": minutes},
            "training": {"sft": training},
        }
    )


def _slow(task: TrainTask, monkeypatch) -> Calibration:
    """A stored 9 tokens/s for the task's stage, read under the load it was taken at (issue 31's number)."""
    cfg = task.train_config("sft")
    tokens = calibration_tokens(cfg, data_tokens(task, "sft", "sft").tokens.mean(cfg.max_length))
    entry = _write(task.model, cfg, tokens, tokens_per_s=9.0, step_s=step_tokens(tokens) / 9.0)
    monkeypatch.setattr(cal_module, "load_now", lambda: BUSY)
    return entry


def test_a_searched_length_is_planned_at_what_the_budget_affords(tmp_path, cache, real_model, monkeypatch):
    """The user's task of issue 31: no rate, no length; the placeholder 100 steps at 9 tokens/s would take
    over an hour of a 10-minute budget. The search chooses the length, so the plan is what the stage's share
    affords (10 min x (1 - 0.15 kept for evaluation - 0.25 for the probes)), never a refusal."""
    task = _chat_task(tmp_path, real_model, {"use_peft": True})
    assert task.search.stages == {"sft": ["learning_rate", "max_steps", "per_device_train_batch_size"]}
    _slow(task, monkeypatch)
    v = plan_stage(task, "sft", task.train_config("sft"), CPU1)
    assert v.runnable and v.throughput_source == "measured" and v.tokens_per_second == 9.0
    assert v.max_steps == int(0.85 * 360 / v.step_seconds) and 1 <= v.max_steps < 100
    assert v.est_minutes <= 10 * 0.6
    assert v.length_note.startswith(
        f"max_steps: the recipe search's to choose; planned at {v.max_steps} steps, what "
        "this stage's 6.0 min of the 10 min budget afford after the probes"
    )
    assert "its placeholder 100 steps would take" in v.length_note and v.length_note in v.reasons
    assert v.estimate_note.startswith("measured 9 tokens/s on this machine at load 1.9 of 2 cores on 2026-12-04")


def test_a_given_length_over_the_budget_is_told_what_to_change(tmp_path, cache, real_model, monkeypatch):
    task = _chat_task(tmp_path, real_model, {"use_peft": True, "max_steps": 100, "learning_rate": 1e-4})
    assert not task.search.stages
    _slow(task, monkeypatch)
    v = plan_stage(task, "sft", task.train_config("sft"), CPU1)
    assert v.max_steps == 100 and v.length_note is None and v.est_minutes > 10
    entry = {**v.model_dump(exclude={"stage"}), "steps_done": 0}
    line = over_budget({"sft": entry}, v.est_minutes, 10.0, 10.0)
    fits = int(10 * 60 / v.step_seconds)
    assert line.startswith(f"raise budget.max_wall_minutes to at least {math.ceil(v.est_minutes * 10) / 10:g} or ")
    assert f" or lower training.sft.max_steps to at most {fits} (from 100; {v.step_seconds:.2f} s a step)" in line
    assert "; the estimate: sft: measured 9 tokens/s on this machine at load 1.9 of 2 cores on 2026-12-04 13:28" in line


def test_a_searched_stage_is_never_told_to_shorten_and_the_guess_says_it_is_one():
    entry = {
        "runnable": True,
        "est_minutes": 30.0,
        "max_steps": 100,
        "step_seconds": 18.0,
        "steps_done": 0,
        "estimate_note": "a FLOP guess: 1 x 0.08 TFLOP/s peak x assumed MFU 0.25 / 800 FLOPs per token",
        "searched": {"settings": ["learning_rate", "max_steps"], "budget_fraction": 0.25},
    }
    line = over_budget({"sft": entry}, 30.0, 18.5, 20.0)
    assert line == (
        "raise budget.max_wall_minutes to at least 31.5; the estimate: sft: a FLOP guess: 1 x 0.08 "
        "TFLOP/s peak x assumed MFU 0.25 / 800 FLOPs per token"
    )


def test_a_planner_refusal_line_names_the_stages_field_and_the_estimate():
    line = refusal_line(
        "sft",
        [
            {
                "field": "per_device_train_batch_size",
                "kind": "impossible",
                "reason": "needs 30.00 GiB per device, 16 GiB available (x0.9 headroom); lower the "
                "micro-batch and raise gradient_accumulation_steps",
            }
        ],
    )
    assert line.startswith("training.sft.per_device_train_batch_size: needs 30.00 GiB per device")
    assert line.endswith(
        "(the planner's memory estimate: weights, gradients, optimizer states and activations "
        "counted in closed form for this model's shape, trainers/planning/estimate.py)"
    )
    assert refusal_line("pretrain", [{"field": "model", "kind": "impossible", "reason": "needs 9 GiB"}]).startswith(
        "training.pretrain: model: needs 9 GiB"
    )


def test_the_readme_says_where_measurements_live_and_how_to_measure_again():
    from pathlib import Path

    text = Path(__file__).resolve().parents[2].joinpath("README.md").read_text()
    section = text.split("### Time estimates and the calibration cache", 1)[1].split("\n### ", 1)[0]
    for words in (
        "$TRAINTEAM_CACHE_DIR/calibration/",
        "~/.cache/trainteam/calibration/",
        "validate --remeasure",
        "the load it was taken under",
        "TRAINTEAM_CACHE_DIR` at another one",
    ):
        assert words in section, words
