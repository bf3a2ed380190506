"""On a CPU a forward holds what its activations allow; the rest of a step's rows accumulate into the same update
(trainers/training/micro_batch.py). Real training steps on the tiny model; the planner sees the same split."""

from __future__ import annotations

import pytest
from transformers import TrainerCallback

from trainteam.trainers import TrainConfig, train
from trainteam.trainers.planning import plan
from trainteam.trainers.planning.hardware import HardwareSpec
from trainteam.trainers.training.config import LoraOptions, ModelSpec
from trainteam.trainers.training.micro_batch import forward_rows, token_budget

SMOLLM2 = ModelSpec(
    hidden_size=576,
    num_layers=30,
    num_heads=9,
    num_kv_heads=3,
    intermediate_size=1536,
    vocab_size=49152,
    max_position_embeddings=8192,
)
CPU = HardwareSpec(device="cpu", devices_per_node=1, device_memory_gib=16, bf16=True)


def test_a_forward_holds_the_largest_divisor_of_the_rows_that_fits():
    assert forward_rows(8, 1, 128, 1, 517) == (4, 2)  # SmolLM2's reply rows on a CPU
    assert forward_rows(8, 2, 128, 2, 517) == (2, 8)  # DPO: two sequences a row
    assert forward_rows(12, 1, 100, 1, 500) == (4, 3)  # 5 would fit, but 12 rows split evenly into 4s
    assert forward_rows(8, 1, 4096, 1, 517) == (1, 8)  # one row at least, however long
    assert forward_rows(8, 1, 128, None, 517) == (8, 1)  # a method whose rows interact: never split
    assert forward_rows(8, 1, 128, 1, None) == (8, 1)  # no bound (a GPU)


def test_the_bound_scales_with_the_model_and_the_config_overrides_it():
    assert token_budget(None, False, 30 * 576) == 517  # SmolLM2-135M: 4 rows of 128 tokens
    assert token_budget(None, False, 16 * 2048) == 273  # a 1B model: 2 rows of 128
    assert token_budget(None, False, 1 * 32) > 100_000  # the tests' tiny model is never split
    assert token_budget(None, True, 30 * 576) is None  # a GPU: the planner sizes its micro-batch
    assert token_budget(4096, False, 30 * 576) == 4096 and token_budget(64, True, None) == 64


class _Layout(TrainerCallback):
    def __init__(self) -> None:
        self.seen: tuple[int, int] | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.seen = (args.per_device_train_batch_size, args.gradient_accumulation_steps)


def _run(tmp_path, tiny, tok, rows, tokens: int):
    layout = _Layout()
    cfg = TrainConfig(
        output_dir=tmp_path,
        max_steps=4,
        per_device_batch_size=8,
        learning_rate=3e-3,
        seq_len=64,
        micro_batch_tokens=tokens,
        seed=3,
    )
    rep = train("sft", cfg, tiny, rows, tokenizer=tok, progress=False, callbacks=[layout])
    return layout.seen, [loss for _, loss in rep.losses], rep.steps_done


def test_a_split_step_trains_on_the_same_rows_to_the_same_losses(tmp_path, tok, arith):
    from trainteam.trainers import ModelSpec as Spec
    from trainteam.trainers import build_model

    spec = Spec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128)
    whole = _run(tmp_path / "whole", build_model(spec, tok), tok, arith[0][:64], 1 << 20)
    split = _run(tmp_path / "split", build_model(spec, tok), tok, arith[0][:64], 24)
    assert whole[0] == (8, 1) and split[0] == (2, 4), (whole[0], split[0])
    assert whole[2] == split[2] == 4
    assert split[1] == pytest.approx(whole[1], rel=1e-4)


def test_the_planner_sizes_memory_for_the_forward_the_trainer_runs():
    lora = TrainConfig(lora=LoraOptions(), precision="bf16")
    split = plan(lora, SMOLLM2, CPU, longest_row=120, dataset_rows=200)
    whole = plan(
        lora.model_copy(update={"micro_batch_tokens": 1 << 20}), SMOLLM2, CPU, longest_row=120, dataset_rows=200
    )
    assert any("a forward holds 4 of the 8 rows" in r for r in split.reasons), split.reasons
    assert not any("a forward holds" in r for r in whole.reasons)
    assert split.memory.activations_gib == pytest.approx(whole.memory.activations_gib / 2, rel=0.05)
    assert split.global_batch_size == whole.global_batch_size == 8
