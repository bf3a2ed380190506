"""Model factory: random init from a ``ModelSpec`` or a local HF folder; never the hub."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.trainers.training.config import ModelSpec

_MODEL_TYPES = {"llama": "llama", "qwen2": "qwen2", "gpt2": "gpt2"}


def _config_kwargs(spec: ModelSpec, tokenizer) -> dict:
    vocab = spec.vocab_size or len(tokenizer)
    inter = spec.intermediate_size or 4 * spec.hidden_size
    ids = dict(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    if spec.arch == "gpt2":
        return dict(
            vocab_size=vocab,
            n_embd=spec.hidden_size,
            n_layer=spec.num_layers,
            n_head=spec.num_heads,
            n_inner=inter,
            n_positions=spec.max_position_embeddings,
            **ids,
        )
    return dict(
        vocab_size=vocab,
        hidden_size=spec.hidden_size,
        num_hidden_layers=spec.num_layers,
        num_attention_heads=spec.num_heads,
        num_key_value_heads=spec.num_kv_heads or spec.num_heads,
        intermediate_size=inter,
        max_position_embeddings=spec.max_position_embeddings,
        tie_word_embeddings=True,
        **ids,
    )


def build_model(spec: ModelSpec, tokenizer, *, attn_implementation: str | None = None, seed: int = 0):
    """A causal LM: ``spec.path`` loaded from disk, else a fresh model from the spec (seeded).

    The embedding is resized when the tokenizer has more tokens than the model (functional
    tokens added after training), so added tokens always have a row.
    """
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from trainteam.trainers.training.progress import quiet_libraries

    quiet_libraries()
    if spec.trust_remote_code:
        raise BadInput("model.trust_remote_code: refused; only local, known architectures are loaded")
    if spec.path is not None:
        model = load_model(spec.path, attn_implementation=attn_implementation)
    else:
        cfg = AutoConfig.for_model(_MODEL_TYPES[spec.arch], **_config_kwargs(spec, tokenizer))
        if attn_implementation:
            cfg._attn_implementation = attn_implementation
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, trust_remote_code=False)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
    return model


def load_model(path: Path, *, attn_implementation: str | None = None, dtype=None):
    """Load a local model folder (safetensors). A missing folder is a BadInput, not a hub lookup."""
    from transformers import AutoModelForCausalLM

    from trainteam.trainers.training.progress import quiet_libraries

    quiet_libraries()
    path = Path(path)
    if (path / "adapter_config.json").is_file():
        from peft import AutoPeftModelForCausalLM

        return AutoPeftModelForCausalLM.from_pretrained(str(path), local_files_only=True, is_trainable=True)
    if not (path / "config.json").is_file():
        raise BadInput(f"model.path: {path} is not a local model folder (no config.json)")
    kwargs: dict[str, Any] = {"local_files_only": True, "trust_remote_code": False}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if dtype is not None:
        kwargs["dtype"] = dtype
    return AutoModelForCausalLM.from_pretrained(str(path), **kwargs)


def count_parameters(model) -> int:
    return sum(p.numel() for p in model.parameters())
