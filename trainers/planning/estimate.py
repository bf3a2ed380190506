"""Closed-form counts: parameters, bytes per device, FLOPs. Plain arithmetic, no torch.

The formulas are the standard ones, so a person can check them by hand:
- parameters of the Llama / Qwen2 / GPT-2 blocks exactly as transformers builds them
  (``trainers/training/models.py`` defaults: intermediate = 4 x hidden, tied embeddings);
- model states after the ZeRO paper (Rajbhandari et al. 2020): 16 bytes per trained
  parameter with AdamW. Under the Trainer's autocast (single, DDP, FSDP) the model itself
  stays fp32: 4 (weights) + 4 (grads) + 8 (Adam m, v); DeepSpeed keeps half-precision
  weights and grads and an fp32 master copy in the optimizer: 2 + 2 + 12. ZeRO-2 shards
  grads and optimizer states, ZeRO-3 and FSDP full-shard shard all three over the
  data-parallel group;
- activations counted per block like Korthikanti et al. 2022, but for the blocks we build
  (SwiGLU, no dropout; see ``activation_bytes``); with gradient checkpointing only each
  layer's input is kept, plus one layer recomputed; the fp32 logits and their gradient
  come on top;
- training FLOPs per token ``6*N + 12*L*h*s`` (Kaplan / PaLM), x 4/3 with recomputation.
"""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, Field

from trainteam.core.errors import BadInput

GIB = 2**30


class ModelShape(BaseModel):
    """The few numbers every estimate needs, from a ModelSpec or a local config.json."""

    arch: str = "llama"
    hidden_size: int = Field(gt=0)
    num_layers: int = Field(gt=0)
    num_heads: int = Field(gt=0)
    num_kv_heads: int = Field(gt=0)
    intermediate_size: int = Field(gt=0)
    vocab_size: int = Field(gt=0)
    max_position_embeddings: int = Field(gt=0)
    tie_word_embeddings: bool = True

    @classmethod
    def from_spec(cls, spec, vocab_size: int | None = None) -> ModelShape:
        """From a ``ModelSpec``; a spec with ``path`` is read from its ``config.json``."""
        if spec.path is not None:
            return cls.from_config_json(Path(spec.path) / "config.json")
        vocab = spec.vocab_size or vocab_size
        if vocab is None:
            raise BadInput("model.vocab_size: unknown; give it in the spec or pass the tokenizer's vocab_size")
        return cls(
            arch=spec.arch,
            hidden_size=spec.hidden_size,
            num_layers=spec.num_layers,
            num_heads=spec.num_heads,
            num_kv_heads=spec.num_kv_heads or spec.num_heads,
            intermediate_size=spec.intermediate_size or 4 * spec.hidden_size,
            vocab_size=vocab,
            max_position_embeddings=spec.max_position_embeddings,
            tie_word_embeddings=True,
        )

    @classmethod
    def from_config_json(cls, path: Path) -> ModelShape:
        if not path.is_file():
            raise BadInput(f"model.path: {path} not found (a local HF model folder has a config.json)")
        return cls.from_config(json.loads(path.read_text()), where=path)

    @classmethod
    def from_config(cls, c: dict, where: Path | str = "config") -> ModelShape:
        """From a transformers config as a dict (a folder's config.json, or ``model.config.to_dict()``)."""
        arch = c.get("model_type", "llama")
        if arch == "gpt2":
            h = c["n_embd"]
            return cls(
                arch="gpt2",
                hidden_size=h,
                num_layers=c["n_layer"],
                num_heads=c["n_head"],
                num_kv_heads=c["n_head"],
                intermediate_size=c.get("n_inner") or 4 * h,
                vocab_size=c["vocab_size"],
                max_position_embeddings=c.get("n_positions", 1024),
                tie_word_embeddings=c.get("tie_word_embeddings", True),
            )
        try:
            return cls(
                arch=arch,
                hidden_size=c["hidden_size"],
                num_layers=c["num_hidden_layers"],
                num_heads=c["num_attention_heads"],
                num_kv_heads=c.get("num_key_value_heads") or c["num_attention_heads"],
                intermediate_size=c["intermediate_size"],
                vocab_size=c["vocab_size"],
                max_position_embeddings=c.get("max_position_embeddings", 2048),
                tie_word_embeddings=c.get("tie_word_embeddings", False),
            )
        except KeyError as exc:
            raise BadInput(f"model.path: {where} lacks {exc.args[0]}") from None

    def signature(self) -> str:
        """What a step's speed depends on, as text: the same for the same architecture in any folder."""
        return (
            f"{self.arch}:h{self.hidden_size}:L{self.num_layers}:a{self.num_heads}/{self.num_kv_heads}:"
            f"i{self.intermediate_size}:v{self.vocab_size}"
        )

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    def linear_shapes(self) -> list[tuple[int, int]]:
        """(in, out) of every linear layer of one block: what LoRA 'all-linear' adapts."""
        h, i, kv = self.hidden_size, self.intermediate_size, self.num_kv_heads * self.head_dim
        if self.arch == "gpt2":
            return [(h, 3 * h), (h, h), (h, i), (i, h)]
        return [(h, h), (h, kv), (h, kv), (h, h), (h, i), (h, i), (i, h)]

    def num_params(self) -> int:
        h, L, V = self.hidden_size, self.num_layers, self.vocab_size
        head = 0 if self.tie_word_embeddings else V * h
        if self.arch == "gpt2":
            i = self.intermediate_size
            per_layer = 4 * h + (h * 3 * h + 3 * h) + (h * h + h) + (h * i + i) + (i * h + h)
            return V * h + self.max_position_embeddings * h + L * per_layer + 2 * h + head
        kv = self.num_kv_heads * self.head_dim
        per_layer = sum(a * b for a, b in self.linear_shapes()) + 2 * h
        if self.arch == "qwen2":
            per_layer += h + 2 * kv  # q, k, v biases
        return V * h + L * per_layer + h + head

    def lora_params(self, r: int) -> int:
        return self.num_layers * sum(r * (a + b) for a, b in self.linear_shapes())


class MemoryEstimate(BaseModel):
    """Bytes one device holds at the peak of a step, in GiB."""

    weights_gib: float
    gradients_gib: float
    optimizer_gib: float
    activations_gib: float
    overhead_gib: float
    total_gib: float
    device_memory_gib: float
    headroom: float = Field(description="fraction of device memory the plan may use")

    @property
    def fits(self) -> bool:
        return self.total_gib <= self.device_memory_gib * self.headroom


def state_bytes_per_param(precision: str, strategy: str) -> tuple[float, float, float]:
    """(weights, gradients, optimizer) bytes per trained parameter."""
    if precision != "fp32" and strategy in ("zero2", "zero3"):
        return (2.0, 2.0, 12.0)
    return (4.0, 4.0, 8.0)


# Measured on this CPU (LoRA SFT of SmolLM2-135M, fp32, sdpa, 2 threads; peak RSS of the training process from
# ru_maxrss, against the saved tensors ``activation_bytes`` counts): micro-batch 2, 4 and 8 of the 61-token dates rows
# and 8 of the 139-token reply rows peaked at 1.43, 1.77, 2.27 and 3.86 GiB, where weights + 0.3 GiB + the saved
# tensors said 1.05, 1.25, 1.67 and 2.73 (0.71-0.73x, the same at every size). A least-squares fit of the four:
# the process (torch, transformers, TRL, PEFT, the trainer) holds 0.62 GiB besides the weights, and a step's peak
# 1.43x its saved tensors (the gradients of the activations alive beside them in backward, and what glibc keeps of
# freed blocks). On a GPU, unmeasured here, the saved tensors alone, as before.
CPU_BACKWARD_PEAK = 1.43
CPU_OVERHEAD_GIB = 0.62


def memory_estimate(
    shape: ModelShape,
    *,
    precision: str,
    strategy: str,
    dp_size: int,
    tp_size: int,
    micro_batch: int,
    seq_len: int,
    gradient_checkpointing: bool,
    attn_implementation: str,
    lora_r: int | None,
    quantize_4bit: bool,
    device_memory_gib: float,
    cuda: bool,
) -> MemoryEstimate:
    n = shape.num_params() / tp_size
    w_b, g_b, o_b = state_bytes_per_param(precision, strategy)
    if lora_r is not None:
        trained = shape.lora_params(lora_r) / tp_size
        # a frozen base is loaded in the training precision (4-bit NF4 + constants for QLoRA)
        frozen_bytes = 0.55 if quantize_4bit else (4.0 if precision == "fp32" else 2.0)
        weights = n * frozen_bytes + trained * w_b
        grads, opt = trained * g_b, trained * o_b
    else:
        weights, grads, opt = n * w_b, n * g_b, n * o_b
    if strategy in ("zero2", "zero3", "fsdp"):
        grads, opt = grads / dp_size, opt / dp_size
    if strategy in ("zero3", "fsdp"):
        weights = weights / dp_size
    act = (
        activation_bytes(
            shape,
            micro_batch=micro_batch,
            seq_len=seq_len,
            precision=precision,
            gradient_checkpointing=gradient_checkpointing,
            attn_implementation=attn_implementation,
        )
        / tp_size
    )
    if not cuda:  # what a step's peak RSS holds beyond the saved tensors (CPU_BACKWARD_PEAK)
        act *= CPU_BACKWARD_PEAK
    overhead = 1.0 * GIB if cuda else CPU_OVERHEAD_GIB * GIB  # CUDA context + allocator slack; Python + libs on CPU
    parts = [weights, grads, opt, act, overhead]
    return MemoryEstimate(
        weights_gib=weights / GIB,
        gradients_gib=grads / GIB,
        optimizer_gib=opt / GIB,
        activations_gib=act / GIB,
        overhead_gib=overhead / GIB,
        total_gib=sum(parts) / GIB,
        device_memory_gib=device_memory_gib,
        headroom=0.9,
    )


def activation_bytes(
    shape: ModelShape,
    *,
    micro_batch: int,
    seq_len: int,
    precision: str,
    gradient_checkpointing: bool,
    attn_implementation: str,
) -> float:
    """Bytes autograd keeps for backward, plus the logits gradient alive when backward starts.

    Per token and layer a SwiGLU block (Llama, Qwen2) saves ``10h + 4I`` values (norm inputs
    and outputs, q, k, v, attention output, gate, up, SiLU, product), a GPT-2 block about
    ``8h + 2I``; eager attention adds ``a*s`` scores. Counted on this machine with
    ``saved_tensors_hooks`` (see benchmarks/plan_accuracy.py).
    """
    tokens = micro_batch * seq_len
    h, i, a, v, L = shape.hidden_size, shape.intermediate_size, shape.num_heads, shape.vocab_size, shape.num_layers
    el = 4 if precision == "fp32" else 2
    per_token = (8 * h + 2 * i) if shape.arch == "gpt2" else (10 * h + 4 * i)
    layer = tokens * per_token * el
    if attn_implementation == "eager":
        layer += tokens * a * seq_len * (4 if precision == "fp32" else 6)  # probs (fp32 softmax, half copy)
    layers = L * tokens * h * el + layer if gradient_checkpointing else L * layer
    head = tokens * (3 * h * el + v * (4 if precision == "fp32" else 6))  # final norm, logits (upcast to fp32)
    grad_logits = tokens * v * 4
    return layers + head + grad_logits


def train_flops_per_token(shape: ModelShape, seq_len: int, gradient_checkpointing: bool) -> float:
    f = 6 * shape.num_params() + 12 * shape.num_layers * shape.hidden_size * seq_len
    return f * (4 / 3 if gradient_checkpointing else 1.0)
