"""Logits only where the loss is (``trainers/training/labelled_logits.py``): on a CPU, TRL's fused LM head scores the
labelled positions only, with the same per-token log-probabilities, loss and gradients as scoring every position;
and every trainer ``train()`` builds runs with it."""

from __future__ import annotations

import pytest
import torch


def _fused_step(model, ids, labels, positions):
    out = model(input_ids=ids, position_ids=positions, labels=labels, fused_lm_head=True)
    loss = -out.log_probs.sum() / (labels[:, 1:] != -100).sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    return out.log_probs.detach(), loss.item(), grads


def test_compact_scoring_gives_the_same_numbers(monkeypatch):
    import trl.trainer.utils as fused
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from trainteam.trainers.training.labelled_logits import score_labelled_positions_only

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=512, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                         num_attention_heads=4, num_key_value_heads=2))
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    ids = torch.randint(0, 512, (1, 96))
    labels = torch.full_like(ids, -100)
    for row in range(4):  # four flattened rows of 24 tokens, the last 5 of each an answer
        labels[0, row * 24 + 19 : (row + 1) * 24] = ids[0, row * 24 + 19 : (row + 1) * 24]
    positions = torch.arange(24).repeat(4)[None]
    # TRL's own choice (another test in this process may have trained already), restored after the test
    monkeypatch.setattr(fused, "_use_triton", getattr(fused._use_triton, "trl_choice", fused._use_triton))
    assert fused._use_triton(torch.device("cpu")) is False  # TRL's own choice: every position on a CPU
    every = _fused_step(model, ids, labels, positions)
    assert score_labelled_positions_only() is True
    assert fused._use_triton(torch.device("cpu")) is True and score_labelled_positions_only() is True
    labelled = _fused_step(model, ids, labels, positions)
    assert torch.allclose(every[0], labelled[0], atol=1e-6) and every[1] == pytest.approx(labelled[1], abs=1e-6)
    assert every[2].keys() == labelled[2].keys()
    for name, grad in every[2].items():
        assert torch.allclose(grad, labelled[2][name], atol=1e-6), name
