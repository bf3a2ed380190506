"""The key names a TRL, transformers or Axolotl recipe uses, mapped onto TrainConfig's own.

TrainConfig's fields carry transformers/TRL's names where they have one (``gradient_accumulation_steps``,
``max_length``...). trainteam's earlier names for them (``EARLIER``: ``grad_accum``, ``seq_len``...) are the
fields' validation aliases, so an old task file validates as written and an error names its key.
Other recipes validate as written too: ``bf16: true`` is ``precision: bf16``, ``lora_r: 16`` is
``lora.r: 16``, ``micro_batch_size`` (Axolotl) is ``per_device_train_batch_size``. ``rewrite(data)`` turns
such a mapping into TrainConfig's names before pydantic validates it (``config._Strict``'s
``mode="before"`` validator calls it); the stored config holds only TrainConfig's names. A setting
given twice (an alias and our name, or two aliases of one setting) is an error naming both;
an unknown key's error names the closest of our names and the aliases (``unknown_keys``).

``OWNED`` lists the TRL/transformers config fields trainteam sets itself (what
``trainer_args.common_args`` and the method builders pass): a ``trl:`` passthrough block may
not set them, and its error names the TrainConfig field to use instead. Plain data, no imports.
"""

from __future__ import annotations

import copy
import difflib
from collections.abc import Collection, Iterable, Mapping
from typing import Any

# trainteam's earlier name -> the TrainConfig field (TRL's name); each field's validation alias
EARLIER: dict[str, str] = {
    "per_device_batch_size": "per_device_train_batch_size",
    "grad_accum": "gradient_accumulation_steps",
    "lr_scheduler": "lr_scheduler_type",
    "use_liger": "use_liger_kernel",
    "seq_len": "max_length",
}
# alias -> TrainConfig field; a dotted path names a sub-model's field (``lora.r``)
RENAMES: dict[str, str] = {
    # transformers TrainingArguments (every TRL config inherits them)
    "activation_checkpointing": "gradient_checkpointing",
    "report_to": "tracker",
    # TRL's old SFTConfig name for the sequence length
    "max_seq_length": "max_length",
    # TRL ModelConfig (its PEFT options)
    "lora_r": "lora.r",
    "lora_alpha": "lora.alpha",
    "lora_dropout": "lora.dropout",
    "lora_target_modules": "lora.target_modules",
    "load_in_4bit": "lora.quantize_4bit",
    # SFTConfig
    "packing": "sft.packing",
    "padding_free": "sft.padding_free",
    "completion_only_loss": "sft.completion_only_loss",
    # DPOConfig
    "precompute_ref_log_probs": "dpo.precompute_ref_log_probs",
    # GRPOConfig
    "num_generations": "grpo.num_generations",
    "max_completion_length": "grpo.max_completion_length",
    "epsilon": "grpo.epsilon",
    "epsilon_high": "grpo.epsilon_high",
    "temperature": "grpo.temperature",
    "vllm_server_base_url": "grpo.vllm_server_url",
    # Axolotl
    "micro_batch_size": "per_device_train_batch_size",
    "sequence_len": "max_length",
    "num_epochs": "num_train_epochs",
    "sample_packing": "sft.packing",
}
# DPOConfig and GRPOConfig both have these: they go to the section of the block's method (``rewrite``)
METHOD_KEYS = ("beta", "loss_type")
# flags that switch a setting on; ``false`` leaves our default
FLAGS: dict[str, tuple[str, Any]] = {
    "bf16": ("precision", "bf16"),
    "fp16": ("precision", "fp16"),
    "use_peft": ("lora", {}),
    "flash_attention": ("attn_implementation", "flash_attention_2"),  # Axolotl
    "sdp_attention": ("attn_implementation", "sdpa"),  # Axolotl
    "lora_target_linear": ("lora.target_modules", "all-linear"),  # Axolotl
}
ADAPTERS = {"lora": {}, "qlora": {"quantize_4bit": True}}  # Axolotl's ``adapter:``
TRACKERS = ("mlflow", "tensorboard", "wandb")

# TRL / transformers config fields trainteam sets, and the TrainConfig field that sets each
OWNED: dict[str, str] = {
    "output_dir": "output_dir",
    "max_steps": "max_steps",
    "num_train_epochs": "num_train_epochs",
    "per_device_train_batch_size": "per_device_train_batch_size",
    "gradient_accumulation_steps": "gradient_accumulation_steps",
    "learning_rate": "learning_rate",
    "lr_scheduler_type": "lr_scheduler_type",
    "warmup_steps": "warmup_steps or warmup_ratio",
    "warmup_ratio": "warmup_ratio",
    "weight_decay": "weight_decay",
    "max_grad_norm": "max_grad_norm",
    "seed": "seed",
    "data_seed": "seed",
    "bf16": "precision",
    "fp16": "precision",
    "use_cpu": "precision (the device is this machine's)",
    "activation_checkpointing": "gradient_checkpointing",
    "gradient_checkpointing": "gradient_checkpointing",
    "use_liger_kernel": "use_liger_kernel",
    "logging_steps": "logging_steps",
    "logging_nan_inf_filter": "spike (NaN losses are kept for the spike monitor)",
    "save_strategy": "save_steps",
    "save_steps": "save_steps",
    "save_total_limit": "save_total_limit",
    "disable_tqdm": "progress (trainteam shows its own)",
    "include_num_input_tokens_seen": "telemetry (trainteam counts the tokens)",
    "dataloader_num_workers": "threads",
    "report_to": "tracker",
    "run_name": "tracker",
    "max_length": "max_length",
}


def owned_by(key: str, method_owned: Mapping[str, str] | None = None) -> str | None:
    """The TrainConfig field that sets TRL's ``key`` (for every method, or for this one: ``method_owned``, its
    record's ``trl_owned``), or None when trainteam leaves it open."""
    return (method_owned or {}).get(key) or OWNED.get(key)


def alias_names() -> list[str]:
    return [*RENAMES, *METHOD_KEYS, *FLAGS, "adapter"]


def did_you_mean(key: str, names: Iterable[str]) -> str | None:
    """The closest of ``names`` to ``key`` (difflib), or None when none is close."""
    found = difflib.get_close_matches(key, list(names), n=1, cutoff=0.6)
    return found[0] if found else None


def unknown_keys(data: dict, fields: Iterable[str], aliases: Iterable[str] = (), *, hint: str = "") -> str | None:
    """One message for the keys of ``data`` that are neither a field nor an alias, each with the
    closest known name; None when every key is known."""
    fields, aliases = list(fields), list(aliases)
    bad = [k for k in data if k not in fields]
    if not bad:
        return None
    parts = []
    for key in bad:
        near = did_you_mean(str(key), fields + aliases)
        if near is None:
            parts.append(f"unknown field {key!r}{hint}")
        elif near in RENAMES:
            parts.append(f"unknown field {key!r}; did you mean {near!r} (trainteam's {RENAMES[near]})?{hint}")
        else:
            parts.append(f"unknown field {key!r}; did you mean {near!r}?{hint}")
    return "; ".join(parts)


class _Sources:
    """Which keys of the input set each TrainConfig setting, to refuse one given twice."""

    def __init__(self, data: dict):
        self.data = data
        self.given: dict[str, str] = {}

    def claim(self, target: str, key: str) -> None:
        """``key`` sets ``target`` (a field or ``section.field``): an error if another key of the
        input (one of our names, or another alias) sets it too."""
        twice = "the same setting given twice; keep one"
        if target in self.given:
            raise ValueError(f"{self.given[target]} and {key}: {twice}")
        top, _, field = target.partition(".")
        if top in self.data and top != key:
            section = self.data[top]
            if not field:
                raise ValueError(f"{top} and {key}: {twice}")
            if section is None:
                raise ValueError(f"{top} and {key}: {top} is null (off) and {key} sets {target}; keep one")
            if not isinstance(section, dict) or field in section:
                raise ValueError(f"{target} and {key}: {twice}")
        self.given[target] = key


def _put(out: dict, target: str, value: Any) -> None:
    if "." not in target:
        out[target] = value
        return
    section, field = target.split(".", 1)
    current = out.get(section)
    out[section] = {**(current if isinstance(current, dict) else {}), field: value}


def _tracker(value: Any) -> str:
    """``report_to`` (a name, ``none``, or a list of names) as our one tracker."""
    names = [value] if isinstance(value, str) else list(value or [])
    names = [n for n in names if n != "none"]
    if not names:
        return "none"
    if len(names) > 1 or names[0] not in TRACKERS:
        raise ValueError(f"report_to: {value!r}: trainteam logs to one tracker, one of {', '.join(TRACKERS)} (or none)")
    return names[0]


def rewrite(data: dict, sections: Mapping[str, Collection[str]]) -> dict:
    """``data`` with every alias turned into TrainConfig's own name (a new dict; ``data`` is not changed).
    ``sections``: the methods that have a block of their own in TrainConfig, and its fields (where a bare
    ``beta`` or ``loss_type`` goes)."""
    if (
        not any(k in data for k in (*RENAMES, *EARLIER, *METHOD_KEYS, *FLAGS, "adapter"))
        and "max_steps" not in data
        and "warmup_steps" not in data
    ):
        return data
    out = copy.deepcopy(data)
    src = _Sources(data)
    for key in [k for k in data if k in EARLIER]:  # kept as written: the field's alias (its errors name it)
        if EARLIER[key] in data:  # both names of one field, named in the order given
            first, second = sorted((key, EARLIER[key]), key=list(data).index)
            raise ValueError(f"{first} and {second}: the same setting given twice; keep one")
        src.claim(EARLIER[key], key)
    for key in [k for k in data if k in RENAMES]:
        value = out.pop(key)
        if key == "report_to":
            value = _tracker(value)
        src.claim(RENAMES[key], key)
        _put(out, RENAMES[key], value)
    for key in [k for k in data if k in FLAGS or k == "adapter"]:
        _flag(out, src, key, out.pop(key))
    for key in [k for k in data if k in METHOD_KEYS]:
        method = data.get("method")
        owners = [name for name, fields in sections.items() if key in fields]
        if method not in owners:
            raise ValueError(
                f"{key}: a {' or '.join(owners)} setting, and this block's method is "
                f"{method or 'sft (the default)'}; "
                f"write {' or '.join(f'{m}.{key}' for m in owners)}, or give method"
            )
        src.claim(f"{method}.{key}", key)
        _put(out, f"{method}.{key}", out.pop(key))
    _steps(out)
    _lora_off(data, out)
    _lora_asked(data, src)
    return out


def _lora_asked(data: dict, src: _Sources) -> None:
    """A LoRA option (``lora_r``...) is not LoRA on: TRL reads it only with ``use_peft: true``, Axolotl
    with ``adapter:``; alone it would silently change full fine-tuning into LoRA, so it is refused."""
    options = [k for t, k in src.given.items() if t.startswith("lora.")]
    if options and "lora" not in data and data.get("use_peft") is not True and "adapter" not in data:
        raise ValueError(
            f"{options[0]}: LoRA is not on; add use_peft: true (TRL) or adapter: lora (Axolotl), "
            "or write trainteam's lora: {...}"
        )


def _flag(out: dict, src: _Sources, key: str, value: Any) -> None:
    if key == "adapter":
        if value not in ADAPTERS:
            raise ValueError(f"adapter: {value!r} is not one of {', '.join(ADAPTERS)}")
        _lora_on(out, ADAPTERS[value], key)
        return
    if not isinstance(value, bool):
        target = FLAGS[key][0]
        raise ValueError(f"{key}: {value!r} is not true or false (or set trainteam's {target})")
    target, on = FLAGS[key]
    if key == "use_peft" and not value:
        out["_lora_off"] = key
        return
    if not value:
        return
    src.claim(target, key)
    if key == "use_peft":
        _lora_on(out, on, key)
    else:
        _put(out, target, on)


def _lora_on(out: dict, options: dict, key: str) -> None:
    """LoRA on (``use_peft: true``, ``adapter: lora``), keeping the LoRA options given beside it."""
    current = out.get("lora")
    if "lora" in out and current is None:
        raise ValueError(f"lora and {key}: lora is null (off) and {key} turns it on; keep one")
    if current is None or isinstance(current, dict):
        out["lora"] = {**options, **(current or {})}


def _lora_off(data: dict, out: dict) -> None:
    """``use_peft: false`` turns LoRA off; a LoRA option beside it contradicts it."""
    key = out.pop("_lora_off", None)
    if key is None:
        return
    others = [
        k
        for k in data
        if k != key
        and (k == "lora" or RENAMES.get(k, "").startswith("lora.") or k in ("adapter", "lora_target_linear"))
    ]
    if others:
        raise ValueError(f"{others[0]} and {key}: {key} is false, so there is no LoRA to set")
    out["lora"] = None


def _steps(out: dict) -> None:
    """How long: TRL's ``max_steps: -1`` beside epochs means "use the epochs"; a warm-up given as a fraction
    (transformers 5's float ``warmup_steps``) is ``warmup_ratio``; max_steps and epochs together
    contradict each other."""
    if out.get("max_steps") == -1 and out.get("num_train_epochs") is not None:
        del out["max_steps"]
    steps = out.get("warmup_steps")
    if isinstance(steps, float) and 0 < steps < 1:
        if out.get("warmup_ratio") is not None:
            raise ValueError("warmup_steps and warmup_ratio: the same setting given twice; keep one")
        out["warmup_ratio"] = out.pop("warmup_steps")
    if out.get("num_train_epochs") is not None and "max_steps" in out:
        raise ValueError("max_steps and num_train_epochs: give one (epochs derive the steps from the data's size)")
    if out.get("warmup_ratio") is not None and out.get("warmup_steps"):
        raise ValueError("warmup_steps and warmup_ratio: the same setting given twice; keep one")
