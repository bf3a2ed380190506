"""Held-out loss scores only the labelled tokens through the LM head (issue 39 part 3): the same numbers as the
full logits, on the real SmolLM2 with chat rows, on a Gemma-2-shaped model with a final logit soft cap, and with
a LoRA adapter on; the head sees at most the labelled positions, in chunks of ``LOGITS_BYTES``."""

from __future__ import annotations

import pytest
import torch

from trainteam.curation.formats import example_ids, prompt_format
from trainteam.trainers.evaluation import battery
from trainteam.trainers.evaluation.battery import heldout_loss, labelled_loss
from trainteam.trainers.training.models import load_model
from trainteam.trainers.training.tokenizer import load_tokenizer

CHAT = [{"messages": [{"role": "user", "content": f"What is {a} plus {b}?"},
                      {"role": "assistant", "content": f"{a} plus {b} is {a + b}."}]} for a, b in
        [(1, 2), (10, 32), (7, 7), (120, 5), (3, 99), (41, 1)]]


def _full_logits_loss(model, ids, mask, labels) -> tuple[float, int]:
    """What heldout_loss computed before: the whole (rows, width, vocabulary) logits."""
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1].float()
    tgt = labels[:, 1:]
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1),
                                             ignore_index=-100, reduction="sum")
    return float(loss), int((tgt != -100).sum())


def _batch(tokenizer, rows):
    fmt = prompt_format(tokenizer)
    ids, labels = [], []
    for r in rows:
        prompt, full = example_ids(tokenizer, r, fmt)
        ids.append(full)
        labels.append([-100] * len(prompt) + full[len(prompt):])
    width, pad = max(map(len, ids)), tokenizer.pad_token_id
    return (torch.tensor([x + [pad] * (width - len(x)) for x in ids]),
            torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in ids]),
            torch.tensor([x + [-100] * (width - len(x)) for x in labels]))


def _head_rows(model) -> tuple[list[int], object]:
    seen: list[int] = []
    handle = model.get_output_embeddings().register_forward_hook(
        lambda _m, args, _out: seen.append(args[0].reshape(-1, args[0].shape[-1]).shape[0]))
    return seen, handle


def test_the_real_model_scores_the_answers_alone_with_the_same_numbers(real_model, monkeypatch):
    model, tokenizer = load_model(real_model), load_tokenizer(real_model)
    ids, mask, labels = _batch(tokenizer, CHAT)
    full, n_full = _full_logits_loss(model, ids, mask, labels)
    seen, handle = _head_rows(model)
    try:
        ours, n = labelled_loss(model, ids, mask, labels)
        assert sum(seen) == n == n_full < ids.numel() // 2  # the answers only: under half of the positions
        assert ours == pytest.approx(full, rel=1e-5)
        seen.clear()
        monkeypatch.setattr(battery, "LOGITS_BYTES", 4 * model.config.vocab_size * 5)  # 5 positions a chunk
        assert labelled_loss(model, ids, mask, labels)[0] == pytest.approx(full, rel=1e-5)
        assert max(seen) == 5 and sum(seen) == n
    finally:
        handle.remove()
    assert heldout_loss(model, tokenizer, CHAT, batch_size=4) == pytest.approx(full / n_full, rel=1e-5)


def test_a_soft_capped_head_and_a_lora_adapter_score_as_their_forward_does():
    from peft import LoraConfig, get_peft_model
    from transformers import Gemma2Config, Gemma2ForCausalLM

    torch.manual_seed(0)
    config = Gemma2Config(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=2, num_key_value_heads=1, head_dim=16, final_logit_softcapping=3.0,
                          max_position_embeddings=64)
    model = Gemma2ForCausalLM(config).eval()
    ids = torch.randint(3, 300, (3, 12))
    mask = torch.ones_like(ids)
    mask[2, 9:] = 0
    labels = ids.clone()
    labels[:, :5] = -100
    labels[2, 9:] = -100
    full, n = _full_logits_loss(model, ids, mask, labels)
    assert labelled_loss(model, ids, mask, labels) == (pytest.approx(full, rel=1e-5), n)
    lora = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    with_adapter, _ = _full_logits_loss(lora, ids, mask, labels)
    assert with_adapter != pytest.approx(full, rel=1e-3)  # the adapter changes the answer: it must be in the path
    assert labelled_loss(lora, ids, mask, labels) == (pytest.approx(with_adapter, rel=1e-5), n)


def test_loss_batches_hold_at_most_the_rows_and_positions_allowed():
    widths = [100, 120, 90, 3000, 10, 10, 10, 10]
    got = battery._loss_batches(widths, most=3)
    assert got == [(0, 3), (3, 4), (4, 7), (7, 8)]  # 3 rows at most; the long row alone
    for start, end in battery._loss_batches(widths, most=64):
        assert end - start == 1 or max(widths[start:end]) * (end - start) <= battery.LOSS_TOKENS
    assert [e - s for s, e in battery._loss_batches([122] * 64, most=64)] == [16] * 4
