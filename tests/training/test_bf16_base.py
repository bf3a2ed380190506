"""Adapters trained in bf16 train on a bf16 base (``bf16_base.frozen_in_bf16``), as LLaMA-Factory and TRL users load
one: the frozen weights at half the memory, the adapters in fp32; the saved adapter names the fp32 base folder,
and merged into it the model is the one trained."""

from __future__ import annotations

import torch

from trainteam.trainers import TrainConfig, heldout_loss, load_model, train
from trainteam.trainers.training.config import LoraOptions


def _dtypes(model, adapters: bool) -> set:
    return {p.dtype for n, p in model.named_parameters() if ("lora_" in n) == adapters}


def test_adapters_in_bf16_train_on_a_bf16_base_and_merge_into_the_fp32_one(tmp_path, tiny, tok, arith):
    rows, held_out = arith
    tiny.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    base = load_model(tmp_path / "base")
    before = heldout_loss(base, tok, held_out)
    model = load_model(tmp_path / "base")  # a stage's probes and its run share one object, cast in place
    lora = dict(max_steps=25, per_device_batch_size=16, learning_rate=1e-2, lora=LoraOptions(r=8, alpha=16))
    report = train("sft", TrainConfig(output_dir=tmp_path / "bf16", precision="bf16", **lora), model, rows,
                   tokenizer=tok, progress=False)
    assert report.stopped_reason == "completed"
    assert _dtypes(model, adapters=False) == {torch.bfloat16}
    assert _dtypes(model, adapters=True) == {torch.float32}

    merged = load_model(report.final_dir).merge_and_unload()  # the adapter's own base: the fp32 folder
    assert {p.dtype for p in merged.parameters()} == {torch.float32}
    assert heldout_loss(merged, tok, held_out) < before - 0.2

    fp32 = load_model(tmp_path / "base")
    train("sft", TrainConfig(output_dir=tmp_path / "fp32", **lora), fp32, rows, tokenizer=tok, progress=False)
    assert _dtypes(fp32, adapters=False) == {torch.float32}  # fp32 asked: nothing cast
