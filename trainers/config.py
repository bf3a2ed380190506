"""Typed configuration of the training stack (pydantic; imports no torch).

One base ``TrainConfig`` holds what every method shares; each method's own
settings sit in a sub-model (``sft``, ``dpo``, ``grpo``, ``lora``) mapped one to
one onto the TRL config of that method. The CLI and task files are built from
these same classes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

Method = Literal["pretrain", "sft", "dpo", "grpo"]
Precision = Literal["fp32", "fp16", "bf16"]
Strategy = Literal["single", "ddp", "fsdp", "zero2", "zero3"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)


class ModelSpec(_Strict):
    """A model built from config with random init, or a local HF model folder."""

    path: Path | None = Field(default=None, description="local HF model folder; no hub downloads")
    arch: Literal["llama", "qwen2", "gpt2"] = "llama"
    hidden_size: int = Field(default=128, gt=0, le=1 << 16)
    num_layers: int = Field(default=2, gt=0, le=1024)
    num_heads: int = Field(default=4, gt=0, le=1024)
    num_kv_heads: int | None = Field(default=None, gt=0, le=1024)
    intermediate_size: int | None = Field(default=None, gt=0, le=1 << 20)
    max_position_embeddings: int = Field(default=256, gt=0, le=1 << 20)
    vocab_size: int | None = Field(default=None, gt=0, le=1 << 21, description="default: the tokenizer's")
    trust_remote_code: bool = Field(default=False, description="only a person turns this on")

    @model_validator(mode="after")
    def _heads_divide(self) -> "ModelSpec":
        if self.path is None and self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        return self


class TokenizerConfig(_Strict):
    vocab_size: int = Field(default=512, ge=260, le=1 << 20, description="byte alphabet (256) + special tokens + merges")
    split_digits: bool = Field(default=True, description="one token per digit; arithmetic fails without it")
    min_frequency: int = Field(default=1, ge=1, le=1 << 30)
    special_tokens: list[str] = Field(default_factory=lambda: ["<pad>", "<s>", "</s>", "<unk>"], max_length=1000)
    extra_tokens: list[str] = Field(default_factory=list, max_length=10000, description="functional tokens added after training")


class LoraOptions(_Strict):
    r: int = Field(default=8, gt=0, le=4096)
    alpha: int = Field(default=16, gt=0, le=1 << 16)
    dropout: float = Field(default=0.0, ge=0, lt=1)
    target_modules: str | list[str] = "all-linear"
    quantize_4bit: bool = Field(default=False, description="QLoRA; needs a CUDA device")


class SFTOptions(_Strict):
    packing: bool | None = Field(default=None, description="None: trainteam chooses")
    padding_free: bool | None = None
    completion_only_loss: bool = True


class DPOOptions(_Strict):
    beta: float = Field(default=0.1, gt=0, le=1000)
    loss_type: list[str] = Field(default_factory=lambda: ["sigmoid"])
    precompute_ref_log_probs: bool = False


class GRPOOptions(_Strict):
    num_generations: int = Field(default=8, ge=2, le=1024)
    max_completion_length: int = Field(default=16, gt=0, le=1 << 16)
    loss_type: Literal["grpo", "dr_grpo", "dapo", "bnpo", "cispo", "sapo"] = "dapo"
    beta: float = Field(default=0.0, ge=0, le=1000)
    epsilon: float = Field(default=0.2, gt=0, le=10)
    epsilon_high: float | None = Field(default=None, gt=0, le=10, description="clip-higher (DAPO)")
    temperature: float = Field(default=1.0, gt=0, le=100)
    vllm_server_url: str | None = Field(default=None, description="separate generation server")


class SpikeSignal(_Strict):
    """A logged metric whose jump means "diverging", and which way it jumps."""

    metric: str = Field(min_length=1, description="a key of the trainer's logs: loss, grad_norm, reward, kl, ...")
    direction: Literal["up", "down"] = "up"


class SpikeOptions(_Strict):
    enabled: bool = True
    window: int = Field(default=128, ge=4, le=100_000)
    sigma: float = Field(default=6.0, gt=0)
    warmup_steps: int = Field(default=64, ge=0, le=10_000_000)
    # Off by default: on the demo's SFT the grad norm rose from ~0.5 to ~1.2 (> 6σ of its
    # window) as the model began to learn the answers, while the loss sat at 1.40 ± 0.04.
    # A non-finite grad norm is a spike either way.
    watch_grad_norm: bool = False
    signals: list[SpikeSignal] | None = Field(default=None, description="None: the method's own "
                                              "(pretrain/sft/dpo: loss up; grpo: reward down, kl up)")
    # A jump must clear sigma × max(window std, rel_floor × |window mean|, abs_floor): a
    # near-constant signal (GRPO's surrogate loss on a solved task sat at -0.0012 ± 0 and
    # read z = 29,756) never makes a spike out of noise.
    rel_floor: float = Field(default=0.01, ge=0)
    abs_floor: float = Field(default=0.02, ge=0)
    max_restarts: int = Field(default=2, ge=0, le=100, description="restart proposals per stage; then the step fails "
                              "(or asks a person, with on_gate_failure: ask)")


class TrainConfig(_Strict):
    method: Method = "sft"
    output_dir: Path | None = None
    seed: int = Field(default=0, ge=0, le=2**32 - 1)
    max_steps: int = Field(default=100, gt=0, le=10_000_000)
    per_device_batch_size: int = Field(default=8, gt=0, le=1 << 16)
    grad_accum: int = Field(default=1, gt=0, le=1 << 16)
    learning_rate: float = Field(default=3e-4, gt=0, le=10)
    lr_scheduler: Literal["cosine", "linear", "constant", "constant_with_warmup", "warmup_stable_decay"] = "cosine"
    warmup_steps: int = Field(default=0, ge=0, le=10_000_000)
    weight_decay: float = Field(default=0.0, ge=0)
    max_grad_norm: float = Field(default=1.0, gt=0, le=1e12)
    seq_len: int = Field(default=128, gt=0, le=1 << 20)
    precision: Precision = "fp32"
    gradient_checkpointing: bool = False
    attn_implementation: Literal["eager", "sdpa", "flash_attention_2"] = "sdpa"
    use_liger: bool = False
    logging_steps: int = Field(default=1, gt=0, le=10_000_000)
    save_steps: int | None = Field(default=None, gt=0, le=10_000_000)
    save_total_limit: int = Field(default=2, gt=0, le=1000)
    resume: Literal["auto", "never"] | Path = "auto"
    strategy: Strategy = "single"
    num_nodes: int = Field(default=1, gt=0, le=4096)
    devices_per_node: int = Field(default=1, gt=0, le=64)
    tensor_parallel_size: int = Field(default=1, gt=0, le=64, description="devices one layer is split over")
    tracker: Literal["none", "mlflow", "tensorboard", "wandb"] = "none"
    threads: int | None = Field(default=None, gt=0, le=1024, description="torch threads; None: chosen from load")
    lora: LoraOptions | None = None
    sft: SFTOptions = Field(default_factory=SFTOptions)
    dpo: DPOOptions = Field(default_factory=DPOOptions)
    grpo: GRPOOptions = Field(default_factory=GRPOOptions)
    spike: SpikeOptions = Field(default_factory=SpikeOptions)
