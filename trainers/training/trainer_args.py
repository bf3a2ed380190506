"""TrainConfig → the arguments every transformers/TRL trainer shares, plus threads and trackers.

One place decides device, precision and logging so that the four methods behave the
same: fp32 on CPU unless asked (TRL would turn bf16 on: emulated, 6–8× slower; on a CPU with native
bf16, avx512_bf16, LoRA SFT of SmolLM2-135M at 1,024 tokens was 1.6× faster), every step logged for
the spike monitor, NaN losses *not* filtered (the monitor must see them).

``trl_args`` is the ``trl:`` passthrough: any other field of the method's TRL config
(its ``TrainingMethod.trl_config``), checked against that dataclass's fields and values, never one that
trainteam sets itself (``key_aliases.OWNED``: the error names our field to use).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.trainers.training import key_aliases
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.micro_batch import forward_rows, model_width, token_budget
from trainteam.trainers.training.threads import Sample, run_threads
from trainteam.trainers.training.tracking import tracking_args


def is_main_process() -> bool:
    """Rank 0 of a launched run (torchrun / accelerate set RANK), or a plain process."""
    return int(os.environ.get("RANK", "0")) == 0


def choose_threads(config: TrainConfig, since: Sample | None = None) -> int:
    """Set torch's thread count for this training by the one rule (``threads.run_threads``): config.threads,
    TRAINTEAM_THREADS, the launched ranks' share, or the cores the neighbours left free since ``since``."""
    import torch

    n = run_threads(config.threads, since)
    torch.set_num_threads(n)
    return n


def has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def check_runtime(config: TrainConfig) -> bool:
    """Refuse settings this machine cannot run, naming the field; returns whether CUDA is here."""
    cuda = has_cuda()
    if config.precision == "fp16" and not cuda:
        raise BadInput("precision: fp16 needs a CUDA device (CPU training runs fp32 or bf16)")
    import importlib.util

    if config.lora and config.lora.quantize_4bit:
        if not cuda:
            raise BadInput("lora.quantize_4bit: QLoRA needs a CUDA device (bitsandbytes 4-bit)")
        if importlib.util.find_spec("bitsandbytes") is None:
            raise BadInput("lora.quantize_4bit: the bitsandbytes package is not installed")
    if config.use_liger_kernel:
        if importlib.util.find_spec("liger_kernel") is None:
            raise BadInput("use_liger_kernel: the liger-kernel package is not installed")
    return cuda


# TrainConfig fields that are TrainingArguments fields of the same name and meaning: passed as they are
SAME_NAMES = (
    "learning_rate",
    "lr_scheduler_type",
    "weight_decay",
    "max_grad_norm",
    "seed",
    "use_liger_kernel",
    "logging_steps",
    "save_total_limit",
)


def common_args(
    config: TrainConfig,
    output_dir: Path,
    *,
    model: Any = None,
    row_tokens: int | None = None,
    sequences_per_row: int | None = None,
) -> dict:
    """Keyword arguments valid for ``TrainingArguments`` and every TRL config: the fields of the same name
    as they are (``SAME_NAMES``), and what trainteam decides from the others. A method that gives its record's
    ``sequences_per_row`` has its micro-batch bounded on a CPU (``micro_batch``: by ``model``'s width and the
    tokens of its longest row, ``row_tokens``, default ``max_length``)."""
    cuda = check_runtime(config)
    rows, accumulation = forward_rows(
        config.per_device_train_batch_size,
        config.gradient_accumulation_steps,
        row_tokens or config.max_length,
        sequences_per_row,
        token_budget(config.micro_batch_tokens, cuda, model_width(model)),
    )
    return dict(
        **config.model_dump(include=set(SAME_NAMES)),
        per_device_train_batch_size=rows,
        gradient_accumulation_steps=accumulation,
        output_dir=str(output_dir),
        # with epochs the trainer derives the steps from its dataloader (transformers' max_steps=-1)
        max_steps=config.max_steps if config.num_train_epochs is None else -1,
        num_train_epochs=config.num_train_epochs or 1.0,
        warmup_steps=config.warmup_ratio if config.warmup_ratio is not None else config.warmup_steps,
        data_seed=config.seed,
        bf16=config.precision == "bf16",
        fp16=config.precision == "fp16",
        use_cpu=not cuda,
        activation_checkpointing=config.gradient_checkpointing,  # TRL configs default it to True
        logging_nan_inf_filter=False,
        save_strategy="steps" if config.save_steps else "no",
        save_steps=config.save_steps or 500,
        disable_tqdm=True,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        **tracking_args(config.tracker, output_dir),
    )


def trl_args(config: TrainConfig, cls: type, where: str = "trl", owned: Mapping[str, str] | None = None) -> dict:
    """The ``trl:`` block, checked against ``cls``, the method's TRL config: every key a field of that
    dataclass (an unknown one: BadInput with the closest field), none that trainteam sets (BadInput
    naming the TrainConfig field that does; ``owned``: the method's own, its record's ``trl_owned``), and the
    values accepted by the class itself."""
    import dataclasses

    if not config.trl:
        return {}
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    for key in config.trl:
        ours = key_aliases.owned_by(key, owned) or key_aliases.RENAMES.get(key)
        if ours is not None:
            raise BadInput(f"{where}.{key}: trainteam sets it from {ours}; set that instead of {where}.{key}")
        if key not in fields:
            near = key_aliases.did_you_mean(key, fields)
            raise BadInput(
                f"{where}.{key}: not a field of TRL's {cls.__name__}" + (f"; did you mean {near!r}?" if near else "")
            )
    _check_values(cls, config, where)
    return dict(config.trl)


def _check_values(cls, config: TrainConfig, where: str) -> None:
    """Build the config class with the block (its other fields at their defaults): a value it
    refuses is BadInput with TRL's reason. Nothing is written (``output_dir`` is not created)."""
    import tempfile
    import warnings

    out = Path(tempfile.gettempdir()) / "trainteam-trl-check"
    try:
        with warnings.catch_warnings():  # the class's own deprecation notes are not about the user's keys
            warnings.simplefilter("ignore")
            cls(output_dir=str(out), use_cpu=True, report_to="none", **config.trl)
    except (TypeError, ValueError) as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise BadInput(f"{where}: {cls.__name__} refuses {sorted(config.trl)}: {reason}") from None


def peft_config(config: TrainConfig):
    """A PEFT LoraConfig from ``config.lora`` (None when full fine-tuning)."""
    if config.lora is None:
        return None
    from peft import LoraConfig

    lo = config.lora
    return LoraConfig(
        r=lo.r,
        lora_alpha=lo.alpha,
        lora_dropout=lo.dropout,
        target_modules=lo.target_modules,
        task_type="CAUSAL_LM",
    )


def quantization_kwargs(config: TrainConfig) -> dict:
    """QLoRA: 4-bit NF4 base weights via bitsandbytes (CUDA only; refused earlier on CPU)."""
    if not (config.lora and config.lora.quantize_4bit):
        return {}
    import torch
    from transformers import BitsAndBytesConfig

    return {
        "quantization_config": BitsAndBytesConfig(
            load_in_4bit=True,
            bnb_4bit_quant_type="nf4",
            bnb_4bit_compute_dtype=torch.bfloat16,
            bnb_4bit_use_double_quant=True,
        )
    }
