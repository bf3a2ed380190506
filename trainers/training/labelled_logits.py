"""Logits only where the loss is: TRL's fused LM head scores just the labelled positions on a CPU too.

TRL 1.16's trainers (SFT, DPO, KTO, GRPO) project the hidden states through the LM head in tiles without
building the full ``(tokens, vocabulary)`` logits (``trl.trainer.utils.add_fused_lm_head``). Which positions a tile
holds is chosen by ``trl.trainer.utils._use_triton``: on CUDA/XPU only the positions with a label (the answers),
elsewhere every position, so that a compiled kernel on an accelerator without Triton keeps one tile shape. A CPU
runs no such kernel: scoring the prompt positions there is work thrown away — most of a chat row, and the LM head
is the largest matmul of a small model with a large vocabulary (SmolLM2's 49k, Gemma 3's 262k).

``score_labelled_positions_only`` makes TRL take its own compact path (gather the labelled positions, score them,
scatter back) for CPU tensors. The per-token log-probabilities, the loss and its gradients are the same numbers
(tests/training/test_labelled_logits.py); a step of SmolLM2 on rows with one answer token in six took 7.2 s instead
of 10.0 s (one thread, ABBA, medians; benchmarks/labelled_logits.py). It changes a private choice of a pinned TRL:
when TRL no longer has it, nothing is changed and the test says so.
"""

from __future__ import annotations

from typing import Any

_MARK = "_trainteam_cpu_compact"


def score_labelled_positions_only() -> bool:
    """Install the CPU choice once per process; False when this TRL has no such choice to make."""
    import trl.trainer.utils as fused

    choice = getattr(fused, "_use_triton", None)
    if choice is None:
        return False
    if getattr(choice, _MARK, False):
        return True

    def compact(device: Any) -> bool:
        return device.type == "cpu" or choice(device)

    setattr(compact, _MARK, True)
    compact.trl_choice = choice  # type: ignore[attr-defined]  # TRL's own, for a test to compare with
    fused._use_triton = compact
    return True
