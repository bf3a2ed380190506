"""The addition recipe end to end through the public API (slow: ~2 minutes of an idle CPU).

LIBRARY-NOTES measured 98.5 % greedy exact match for a 0.58M Llama with digits split,
one problem per row, loss on the answer only, batch 64, lr 3e-3 cosine, 2,000 steps.
Measured through this API on 2026-12-01: 13.5 % with the Trainer's default gradient
clipping (max_grad_norm 1.0; padded or padding-free alike), 61 % without clipping (as
the notes' raw loop) — the rest of the gap to 98.5 % is not found yet.
"""

from __future__ import annotations

import pytest

from trainteam.curation.demo import generate_arithmetic
from trainteam.trainers import ModelSpec, TokenizerConfig, TrainConfig, build_model, exact_match, load_tokenizer, train, train_tokenizer


@pytest.mark.slow
def test_addition_recipe_reaches_high_exact_match(tmp_path):
    train_recs, eval_recs = generate_arithmetic()
    tok = load_tokenizer(train_tokenizer((r["prompt"] + r["completion"] for r in train_recs), TokenizerConfig(vocab_size=300), tmp_path / "tok"))
    model = build_model(ModelSpec(hidden_size=128, num_layers=2, num_heads=4), tok)
    cfg = TrainConfig(output_dir=tmp_path / "run", max_steps=2000, per_device_batch_size=64, learning_rate=3e-3,
                      lr_scheduler="cosine", seq_len=32, logging_steps=50, save_steps=1000,
                      max_grad_norm=1e9)  # no clipping, as the recipe's raw loop
    rep = train("sft", cfg, model, train_recs, tokenizer=tok, progress=False)
    assert rep.stopped_reason == "completed"
    res = exact_match(rep.final_dir, tok, eval_recs, max_new_tokens=5)
    assert res.accuracy >= 0.95, res.samples[:5]
