"""How many rows one forward holds: on a CPU, a micro-batch bounded by the activations it keeps.

A CPU's matmuls run as fast at a few hundred tokens a forward as at thousands, while the activations a forward
keeps for backward grow with every token, layer and hidden unit. Measured here (2 threads, LoRA SFT of
SmolLM2-135M-Instruct on a bf16 base, 8 rows an optimizer step, two interleaved runs each, docs/history.md "A
forward bounded by its activations"):

    rows a forward x forwards   reply rows (~120 tokens)     dates rows (~61 tokens)
    8 x 1                       3.47 s a step, 2,780 MiB     1.58 s, 1,759 MiB
    4 x 2                       3.55 s,        1,990 MiB     1.72 s, 1,454 MiB
    2 x 4                       4.17 s,        1,618 MiB     2.29 s, 1,270 MiB
    1 x 8                       5.0 s,         1,499 MiB     -

Halving the reply rows' forward (512 tokens fewer) gave back 790 MiB: ~90 bytes per token, layer and hidden unit.
So on a CPU a forward keeps at most ``CPU_ACTIVATIONS`` (~517 tokens of SmolLM2's 30 x 576, ~270 of a 16 x 2,048
model; a tiny test model is never split), and the rest of an optimizer step's rows accumulate: the step sees the
same rows and transformers normalises the accumulated loss by the whole batch's tokens, so the update is the same
up to float rounding. ``TrainConfig.micro_batch_tokens`` sets the bound in tokens instead. A GPU is not split (the
planner sizes its micro-batch against its memory). A method whose rows interact inside a forward (KTO's KL pairs,
GRPO's groups) says so in its record (``TrainingMethod.sequences_per_row = None``) and is never split. No library
decides this: transformers and TRL take the micro-batch as given.
"""

from __future__ import annotations

from typing import Any

CPU_ACTIVATIONS = 768 << 20  # bytes a forward keeps for backward on a CPU, at most
BYTES_PER_UNIT = 90  # measured: activation bytes per token, layer and hidden unit (see above)


def forward_rows(
    rows: int, accumulation: int, row_tokens: int, sequences_per_row: int | None, budget: int | None
) -> tuple[int, int]:
    """``(rows a forward holds, forwards an optimizer step accumulates)`` for ``rows`` x ``accumulation`` rows a
    step of at most ``row_tokens`` tokens in each of a row's ``sequences_per_row`` sequences: the largest divisor of
    ``rows`` whose tokens fit ``budget`` tokens (one row at least); as given with no budget or no split."""
    if budget is None or sequences_per_row is None:
        return rows, accumulation
    most = max(1, budget // max(1, row_tokens * sequences_per_row))
    held = max(d for d in range(1, rows + 1) if rows % d == 0 and d <= most)
    return held, accumulation * (rows // held)


def token_budget(micro_batch_tokens: int | None, cuda: bool, width: int | None) -> int | None:
    """The tokens one forward may hold: the config's; else on a CPU what keeps ``CPU_ACTIVATIONS`` for a model
    ``width`` (layers x hidden size) wide; else (a GPU, or no width known) no bound."""
    if micro_batch_tokens is not None:
        return micro_batch_tokens
    if cuda or not width:
        return None
    return max(1, CPU_ACTIVATIONS // (BYTES_PER_UNIT * width))


def model_width(model: Any) -> int | None:
    """Layers x hidden size of a transformers model (its text model's), None where its config does not say."""
    config = getattr(model, "config", None)
    if config is None:
        return None
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers, hidden = getattr(text, "num_hidden_layers", None), getattr(text, "hidden_size", None)
    return layers * hidden if isinstance(layers, int) and isinstance(hidden, int) else None
