"""TIES merge of two LoRA adapters (PEFT add_weighted_adapter) gives a working full model."""

from __future__ import annotations

import pytest

from trainteam.core.errors import BadInput
from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
from trainteam.trainers import TrainConfig, exact_match, heldout_loss, load_model, merge_adapters, train
from trainteam.trainers.training.config import LoraOptions


def test_ties_merge_of_two_adapters_keeps_both_skills(tmp_path, tiny, tok, arith):
    add_train, add_eval = arith
    sub_train, sub_eval = generate_arithmetic(ArithmeticConfig(task="subtraction", n_train=600, n_eval=40, seed=1))
    tiny.save_pretrained(tmp_path / "base")
    tok.save_pretrained(tmp_path / "base")
    cfg = dict(max_steps=25, per_device_batch_size=16, learning_rate=1e-2, lora=LoraOptions(r=8, alpha=16))
    a = train(
        "sft",
        TrainConfig(output_dir=tmp_path / "add", **cfg),
        tmp_path / "base",
        add_train,
        tokenizer=tok,
        progress=False,
    )
    s = train(
        "sft",
        TrainConfig(output_dir=tmp_path / "sub", **cfg),
        tmp_path / "base",
        sub_train,
        tokenizer=tok,
        progress=False,
    )

    merged_dir = merge_adapters(
        [a.final_dir, s.final_dir], tmp_path / "merged", tokenizer=tok, combination_type="ties", density=0.5
    )
    assert (merged_dir / "model.safetensors").is_file() and not (merged_dir / "adapter_config.json").exists()
    merged = load_model(merged_dir)
    assert all(p.requires_grad for p in merged.parameters())  # trainable again after merge_and_unload
    base = load_model(tmp_path / "base")
    for recs in (add_eval, sub_eval):
        assert heldout_loss(merged, tok, recs) < heldout_loss(base, tok, recs) - 0.2
    res = exact_match(merged_dir, tok, add_eval[:4], max_new_tokens=4)
    assert res.n == 4


def test_merge_refuses_bad_input(tmp_path):
    with pytest.raises(BadInput, match="at least two"):
        merge_adapters([tmp_path], tmp_path / "m")
    with pytest.raises(BadInput, match="not a PEFT adapter"):
        merge_adapters([tmp_path, tmp_path], tmp_path / "m")
