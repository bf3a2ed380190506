"""TrainConfig → the arguments every transformers/TRL trainer shares, plus threads and trackers.

One place decides device, precision and logging so that the four methods behave the
same: fp32 on CPU (TRL would turn bf16 on and run 6–8× slower), every step logged for
the spike monitor, NaN losses *not* filtered (the monitor must see them).
"""

from __future__ import annotations

import os
from pathlib import Path

from trainteam.core.errors import BadInput
from trainteam.trainers.config import TrainConfig
from trainteam.trainers.threads import cpu_sample, neighbours_since, threads_for
from trainteam.trainers.tracking import tracking_args


def is_main_process() -> bool:
    """Rank 0 of a launched run (torchrun / accelerate set RANK), or a plain process."""
    return int(os.environ.get("RANK", "0")) == 0


def choose_threads(config: TrainConfig, since: tuple[float, float, float] | None = None) -> int:
    """The torch thread count, fixed for the whole of this training (weights depend on it).

    config.threads or TRAINTEAM_THREADS fix the count (a run records its choice and passes it
    on, so a resumed or replayed run trains on the same count); otherwise it is the cores the
    neighbours left free since ``since`` (a ``threads.cpu_sample()`` taken when set-up began).
    """
    import torch

    if config.threads:
        n = config.threads
    elif os.environ.get("TRAINTEAM_THREADS"):
        n = int(os.environ["TRAINTEAM_THREADS"])
    elif int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))) > 1:
        # Launched ranks share the node's cores.
        n = max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))))
    else:
        n = idle_cores(since)
    torch.set_num_threads(n)
    return n


def idle_cores(since: tuple[float, float, float] | None = None, sample_s: float = 0.3) -> int:
    """Threads for the cores the neighbours leave free, measured over at least ``sample_s``
    (the rule is ``threads.threads_for``). The load average is no guide: it still counts a
    training run that ended a minute ago."""
    cores = os.cpu_count() or 1
    return threads_for(neighbours_since(since or cpu_sample(), sample_s), cores, current=cores)


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
    if config.use_liger:
        if importlib.util.find_spec("liger_kernel") is None:
            raise BadInput("use_liger: the liger-kernel package is not installed")
    return cuda


def common_args(config: TrainConfig, output_dir: Path) -> dict:
    """Keyword arguments valid for ``TrainingArguments`` and every TRL config."""
    cuda = check_runtime(config)
    return dict(
        output_dir=str(output_dir),
        max_steps=config.max_steps,
        per_device_train_batch_size=config.per_device_batch_size,
        gradient_accumulation_steps=config.grad_accum,
        learning_rate=config.learning_rate,
        lr_scheduler_type=config.lr_scheduler,
        warmup_steps=config.warmup_steps,
        weight_decay=config.weight_decay,
        max_grad_norm=config.max_grad_norm,
        seed=config.seed,
        data_seed=config.seed,
        bf16=config.precision == "bf16",
        fp16=config.precision == "fp16",
        use_cpu=not cuda,
        activation_checkpointing=config.gradient_checkpointing,  # TRL configs default it to True
        use_liger_kernel=config.use_liger,
        logging_steps=config.logging_steps,
        logging_nan_inf_filter=False,
        save_strategy="steps" if config.save_steps else "no",
        save_steps=config.save_steps or 500,
        save_total_limit=config.save_total_limit,
        disable_tqdm=True,
        include_num_input_tokens_seen="non_padding",
        dataloader_num_workers=0,
        **tracking_args(config.tracker, output_dir),
    )


def peft_config(config: TrainConfig):
    """A PEFT LoraConfig from ``config.lora`` (None when full fine-tuning)."""
    if config.lora is None:
        return None
    from peft import LoraConfig

    lo = config.lora
    return LoraConfig(
        r=lo.r, lora_alpha=lo.alpha, lora_dropout=lo.dropout, target_modules=lo.target_modules, task_type="CAUSAL_LM",
    )


def quantization_kwargs(config: TrainConfig) -> dict:
    """QLoRA: 4-bit NF4 base weights via bitsandbytes (CUDA only; refused earlier on CPU)."""
    if not (config.lora and config.lora.quantize_4bit):
        return {}
    import torch
    from transformers import BitsAndBytesConfig

    return {
        "quantization_config": BitsAndBytesConfig(
            load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_compute_dtype=torch.bfloat16, bnb_4bit_use_double_quant=True,
        )
    }
