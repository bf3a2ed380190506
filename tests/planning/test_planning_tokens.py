"""The planner counts real tokens with the task's tokenizer and takes its throughput from a calibration
measured on this machine (cached per model and machine), and epochs become the trainer's own steps."""

from __future__ import annotations

import json

import pytest
from instruction_rows import as_chat, instruction_rows

from trainteam.contract.train_task import TrainTask
from trainteam.trainers.planning import HardwareSpec, plan
from trainteam.trainers.planning import calibrate as calibrate_module
from trainteam.trainers.planning.calibrate import Calibration, cache_dir, calibrate, lookup
from trainteam.trainers.planning.load import Load
from trainteam.trainers.planning.planner import planned_steps
from trainteam.trainers.planning.tokens import bytes_bound, count_tokens, model_tokenizer
from trainteam.trainers.training.config import LoraOptions, ModelSpec, TrainConfig
from trainteam.workflows.task.stage_plan import plan_stage

CPU1 = HardwareSpec(device="cpu", device_memory_gib=16, peak_tflops=0.08)
TINY = ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=64, vocab_size=300)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINTEAM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "calibration"


def test_chat_rows_are_counted_through_the_models_template(real_model):
    """Within a few % of the real tokenizer's own count of each templated conversation (here: exact),
    where the old bound from bytes was far off (the template's turns and system prompt are tokens too)."""
    tok = model_tokenizer(str(real_model))
    rows = as_chat(instruction_rows(60))
    counted = count_tokens(tok, rows, "sft")
    real = [len(tok.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"]) for r in rows]
    assert counted.prompt_format == "chat" and counted.source == "tokenizer" and len(counted.lengths) == 60
    assert counted.mean() == pytest.approx(sum(real) / len(real), rel=0.03)
    assert counted.longest == max(real)
    bound = bytes_bound(rows).mean()
    assert abs(bound - counted.mean()) / counted.mean() > 0.1  # the bytes do not tell a templated row's tokens


def test_a_conversation_with_two_replies_is_two_sft_examples(real_model):
    tok = model_tokenizer(str(real_model))
    two = {"messages": [{"role": "user", "content": "Capital of France?"}, {"role": "assistant", "content": "Paris"},
                        {"role": "user", "content": "And of Spain?"}, {"role": "assistant", "content": "Madrid"}]}
    counted = count_tokens(tok, [two], "sft")
    assert counted.examples_per_row == 2.0 and counted.lengths[0] < counted.lengths[1]


def test_epochs_become_the_steps_the_trainer_takes_and_the_tokens_it_computes(tmp_path, real_model):
    """One epoch over 16 chat rows at batch 8: the planner's steps are the trainer's, and its tokens
    are the templated rows' (the trainer's own count leaves out tokens equal to the pad id: SmolLM2's
    pad is its <|im_end|>, three per row here)."""
    from trainteam.trainers import train

    tok = model_tokenizer(str(real_model))
    rows = as_chat(instruction_rows(16))
    cfg = TrainConfig.model_validate({"output_dir": str(tmp_path / "out"), "num_train_epochs": 1,
                                      "per_device_train_batch_size": 8, "max_length": 128, "use_peft": True,
                                      "lora_r": 4, "learning_rate": 1e-4, "threads": 1})
    counted = count_tokens(tok, rows, "sft")
    planned = plan(cfg, ModelSpec(path=real_model), CPU1, dataset_rows=len(rows), row_tokens=counted.mean(128))
    report = train("sft", cfg, str(real_model), rows, tokenizer=tok, progress=False)
    assert planned.max_steps == report.steps_done == report.telemetry["max_steps"] == 2
    ids = [tok.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"] for r in rows]
    pads = sum(row.count(tok.pad_token_id) for row in ids)
    assert report.telemetry["tokens"] + pads == pytest.approx(planned.total_tokens, rel=0.03)


@pytest.mark.parametrize("rows, batch, accum, epochs, steps", [
    (100, 8, 1, 1, 13), (100, 8, 4, 1, 4), (100, 8, 4, 2.5, 10), (8, 8, 4, 3, 3), (100, 8, 1, 0.5, 7),
])
def test_planned_steps_follow_transformers_rule(rows, batch, accum, epochs, steps):
    cfg = TrainConfig(num_train_epochs=epochs, per_device_batch_size=batch, grad_accum=accum)
    assert planned_steps(cfg, rows) == steps


def test_epochs_without_a_row_count_are_refused_naming_the_field():
    from trainteam.core.errors import BadInput

    with pytest.raises(BadInput, match="^num_train_epochs: the planner needs the data's row count"):
        plan(TrainConfig(num_train_epochs=1), TINY, CPU1)


def test_a_calibration_is_measured_once_and_read_back_per_model_and_shape(cache):
    cfg = TrainConfig(per_device_batch_size=4, seq_len=32, threads=1)
    assert lookup(TINY, cfg, 128, device="cpu") is None
    first = calibrate(TINY, cfg, 128, device="cpu", min_seconds=0.05)
    assert first.tokens_per_s > 0 and first.tokens_per_step == 128 and first.steps >= 1 and first.threads == 1
    assert first.load is not None and first.load.threads == 1  # the load it was measured under, recorded with it
    stored = list(cache.glob("*.json"))
    assert len(stored) == 1 and json.loads(stored[0].read_text())["tokens_per_s"] == first.tokens_per_s
    same = first.load  # read back under the load it was measured at: as stored, not measured again
    assert lookup(TINY, cfg, 128, device="cpu", now=same) == first == calibrate(TINY, cfg, 128, device="cpu", now=same)
    # another shape or adapter is another measurement
    assert lookup(TINY, cfg, 256, device="cpu", now=same) is None
    assert lookup(TINY, cfg.model_copy(update={"lora": LoraOptions(r=4)}), 128, device="cpu", now=same) is None
    # a thread count is not (changed for issue 31): threads follow the load, so the reading is scaled to the
    # cores its one measured thread gets now (a second thread is not counted on until measured)
    freer = Load(neighbours=0.0, share=2 * first.load.share, threads=1, cores=2)  # twice the core it got
    two = lookup(TINY, cfg.model_copy(update={"threads": 2}), 128, device="cpu", now=freer)
    assert two.tokens_per_s == pytest.approx(first.tokens_per_s * 2, rel=1e-6)
    assert two.note.startswith("scaled x") and two.measured_tokens_per_s == first.tokens_per_s
    assert cache_dir() == cache


def _task(real_model, data_path, eval_path, **training) -> TrainTask:
    return TrainTask.model_validate({
        "name": "chat", "model": {"path": str(real_model)}, "stages": ["sft"], "budget": {"max_wall_minutes": 10},
        "data": {"path": str(data_path), "eval_path": str(eval_path)},
        "training": {"sft": {"per_device_train_batch_size": 4, "max_length": 128, "threads": 1, "use_peft": True,
                             **training}}})


def test_plan_stage_counts_the_files_rows_with_the_tokenizer_and_uses_the_measurement(tmp_path, cache, real_model,
                                                                                      monkeypatch):
    train_rows, eval_rows = as_chat(instruction_rows(40)), as_chat(instruction_rows(10, start=40))
    for name, rows in (("train.jsonl", train_rows), ("eval.jsonl", eval_rows)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = _task(real_model, tmp_path / "train.jsonl", tmp_path / "eval.jsonl", num_train_epochs=2)
    cfg = task.train_config("sft")
    guessed = plan_stage(task, "sft", cfg, CPU1)
    tok = model_tokenizer(str(real_model))
    real = sum(len(tok.apply_chat_template(r["messages"], tokenize=True, return_dict=True)["input_ids"])
               for r in train_rows) / len(train_rows)
    assert guessed.row_tokens_source == "tokenizer" and guessed.row_tokens == pytest.approx(real, rel=0.03)
    assert guessed.examples == 40 and guessed.max_steps == 20  # 2 epochs of 40 rows at batch 4
    assert guessed.total_tokens == pytest.approx(20 * 4 * real, rel=0.03)
    assert guessed.throughput_source == "assumed"
    measured = plan_stage(task, "sft", cfg, CPU1, measure=True)
    assert measured.throughput_source == "measured" and len(list(cache.glob("*.json"))) == 1
    assert any("measured" in r and "on this machine" in r for r in measured.reasons)
    assert measured.estimate_note.startswith("measured ") and " at load " in measured.estimate_note
    (entry,) = cache.glob("*.json")
    stored = Calibration.model_validate_json(entry.read_text())
    monkeypatch.setattr(calibrate_module, "load_now", lambda: stored.load)  # the same load now: read as stored
    again = plan_stage(task, "sft", cfg, CPU1)  # a later plan (preflight, the engineer's) reads it back
    assert again.tokens_per_second == measured.tokens_per_second and again.throughput_source == "measured"
    rounding = 5e-4 + again.est_minutes * 0.005 / again.tokens_per_second  # minutes to 3 decimals, tokens/s to 2
    assert again.est_minutes == pytest.approx(again.total_tokens / again.tokens_per_second / 60, abs=rounding)


def test_a_preference_pair_is_counted_as_two_sequences_for_every_method_that_trains_on_pairs():
    """DPO's and KTO's records say a row spans two sequences (a pair's chosen and rejected answers): the bound
    from bytes counts both, and the planner gives a row a window of two sequences of max_length."""
    from trainteam.trainers.planning.planner import _row_window
    from trainteam.trainers.training.config import TrainConfig

    rows = [{"prompt": "Capital of France?", "chosen": "Paris", "rejected": "Lyon"}]
    one = bytes_bound(rows, "sft").lengths[0]
    for method in ("dpo", "kto"):
        assert bytes_bound(rows, method).lengths == [2 * one]
        assert _row_window(TrainConfig(method=method, max_length=64), 100.0) == (128.0, 100.0)
    assert _row_window(TrainConfig(method="sft", max_length=64), 100.0) == (64.0, 64.0)
    assert _row_window(TrainConfig(method="grpo", max_length=64), 100.0) == (64.0, 64.0)
