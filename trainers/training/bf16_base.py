"""A bf16 base for adapters trained in bf16: the frozen weights cast once, the adapters kept in fp32.

LLaMA-Factory and TRL users load the base in bf16 to train LoRA in bf16; trainteam's trainer got the model in
fp32 and trained under autocast, which keeps the fp32 weights and saves a bf16 copy of each for the backward pass:
no smaller than fp32. With the frozen weights in bf16 (PEFT keeps the adapters in fp32) the weights take half the
memory and, on a CPU with native bf16, the matmuls run faster: LoRA SFT of SmolLM2-135M on 8 chat rows of 61
tokens, 2.26 → 1.55–1.82 s a step and peak RSS 2,308 → 1,802 MiB at the same loss (docs/history.md).
"""

from __future__ import annotations

from typing import Any

from trainteam.trainers.training.config import TrainConfig

_MARK = "_trainteam_contiguous_input"


def frozen_in_bf16(model: Any, config: TrainConfig) -> Any:
    """``model`` with its frozen weights in bf16 when ``config`` trains adapters in bf16 (a 4-bit base keeps its
    own compute dtype), else as it came. Cast in place: a stage's probes and its final run share the model object
    and train at the same precision; the next stage loads its own from a folder."""
    if config.precision != "bf16" or config.lora is None or config.lora.quantize_4bit:
        return model
    import torch

    adapters = hasattr(model, "peft_config")  # a model that carries adapters: its trainable ones stay fp32
    for param in model.parameters():
        if param.dtype == torch.float32 and not (adapters and param.requires_grad):
            param.data = param.data.to(torch.bfloat16)
    _contiguous_head_input(model)
    return model


def _contiguous_head_input(model: Any) -> None:
    """Give the LM head a contiguous input. torch 2.13 on a CPU: ``linear`` on a strided bf16 input — the last
    position that generation slices out of the hidden states — materialises the weight once per row (40 rows of
    SmolLM2's 49k x 576 head: +2.1 GB of peak RSS for 4 MB of logits; 64 rows +3.4 GB; fp32 does not). A probe's
    scoring generates with the model being trained; the copy of one position per row costs nothing."""
    head = model.get_output_embeddings()
    if head is None or getattr(head, _MARK, False):
        return
    head.register_forward_pre_hook(lambda _module, args: (args[0].contiguous(), *args[1:]))
    setattr(head, _MARK, True)
