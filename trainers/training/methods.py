"""One Trainer per method, built from TrainConfig. The loops and losses are the libraries'.

pretrain: transformers ``Trainer`` on packed windows; sft/dpo/grpo: TRL's trainers;
LoRA/QLoRA: PEFT (``peft_config`` handed to TRL, ``get_peft_model`` for pretrain).
"""

from __future__ import annotations

import copy
from pathlib import Path

from trainteam.core.errors import BadInput
from trainteam.curation.rewards import default_rewards
from trainteam.trainers.training import method_data as D
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.trainer_args import common_args, peft_config, trl_args


def build_pretrain(config: TrainConfig, model, tokenizer, ds, eval_ds, out: Path, callbacks):
    from transformers import Trainer, TrainingArguments, default_data_collator

    train_ds = D.packed_windows(tokenizer, ds, config.seq_len)
    ev = D.packed_windows(tokenizer, eval_ds, config.seq_len) if eval_ds is not None else None
    pc = None if _is_peft(model) else peft_config(config)
    if pc is not None:
        from peft import get_peft_model

        model = get_peft_model(model, pc)
    args = TrainingArguments(**common_args(config, out), remove_unused_columns=False, **trl_args(config))
    return Trainer(
        model=model, args=args, train_dataset=train_ds, eval_dataset=ev, processing_class=tokenizer,
        data_collator=default_data_collator, callbacks=callbacks,
    )


def _longest_row(tokenizer, ds) -> int:
    return max(D.row_lengths(tokenizer, ds))


def sft_layout(config: TrainConfig, tokenizer, ds) -> dict:
    """Packing / padding-free choice when the config leaves it open.

    Rows that vary in length waste most of a padded batch; padding-free (one flattened
    row with position ids) trains only real tokens: 1.4× TRL's padded default on an idle
    CPU here, far more under load (benchmarks/sft_throughput.py). It is exact in training:
    with no KV cache (Trainer sets ``use_cache=False``) transformers detects the reset
    position ids and masks attention between the flattened rows, on sdpa too — padded
    and padding-free SFT give identical losses step for step (test_train_methods). A
    forward *with* a cache skips that detection, which is how a check outside training
    can see rows attend to each other. It cannot truncate, so rows longer than
    ``seq_len`` fall back to padded batches that TRL truncates. Packing (bfd) fills
    windows with several rows, which changes the number of rows per step, so it is only
    used when asked for.
    """
    packing = bool(config.sft.packing)
    padding_free = config.sft.padding_free
    too_long = not packing and _longest_row(tokenizer, ds) > config.seq_len
    if padding_free is None:
        padding_free = not packing and not too_long
    elif padding_free and too_long:
        raise BadInput(f"sft.padding_free: rows longer than seq_len={config.seq_len} cannot be truncated without packing")
    kw = dict(packing=packing, padding_free=padding_free, completion_only_loss=config.sft.completion_only_loss)
    if packing:
        kw.update(max_length=config.seq_len, packing_strategy="bfd")
    elif padding_free:
        kw.update(max_length=None)
    else:
        kw.update(max_length=config.seq_len)
    return kw


def build_sft(config: TrainConfig, model, tokenizer, ds, eval_ds, out: Path, callbacks):
    from trl import SFTConfig, SFTTrainer

    train_ds = D.sft_dataset(tokenizer, ds)
    ev = D.sft_dataset(tokenizer, eval_ds) if eval_ds is not None else None
    args = SFTConfig(**common_args(config, out), **sft_layout(config, tokenizer, train_ds), dataset_num_proc=None,
                     **trl_args(config))
    return SFTTrainer(
        model=model, args=args, train_dataset=train_ds, eval_dataset=ev, processing_class=tokenizer,
        callbacks=callbacks, peft_config=None if _is_peft(model) else peft_config(config),
    )


def build_dpo(config: TrainConfig, model, tokenizer, ds, eval_ds, out: Path, callbacks):
    from trl import DPOConfig, DPOTrainer

    train_ds = D.dpo_dataset(tokenizer, ds)
    ev = D.dpo_dataset(tokenizer, eval_ds) if eval_ds is not None else None
    o = config.dpo
    args = DPOConfig(
        **common_args(config, out), beta=o.beta, loss_type=list(o.loss_type),
        precompute_ref_log_probs=o.precompute_ref_log_probs, max_length=config.seq_len, **trl_args(config),
    )
    pc = None if _is_peft(model) else peft_config(config)
    # Without PEFT, TRL would reload the reference from model.config._name_or_path: stale or
    # missing for an in-memory model. A frozen copy is the reference we mean.
    ref = None if pc is not None or _is_peft(model) else copy.deepcopy(model).eval()
    return DPOTrainer(
        model=model, ref_model=ref, args=args, train_dataset=train_ds, eval_dataset=ev,
        processing_class=tokenizer, callbacks=callbacks, peft_config=pc,
    )


def grpo_args(config: TrainConfig, out: Path):
    """GRPOConfig from TrainConfig: loss variant, clip-higher, and a separate vLLM server if given."""
    from trl import GRPOConfig

    o = config.grpo
    vllm = {}
    if o.vllm_server_url:
        from trl.import_utils import is_vllm_available

        if not is_vllm_available():
            raise BadInput("grpo.vllm_server_url: the vllm package is needed to talk to a generation server")
        vllm = dict(use_vllm=True, vllm_mode="server", vllm_server_base_url=o.vllm_server_url)
    batch = config.per_device_batch_size
    # The generation batch must divide by num_generations: round the batch up to a multiple.
    if batch % o.num_generations:
        batch = ((batch // o.num_generations) + 1) * o.num_generations
    kw = common_args(config, out)
    kw["per_device_train_batch_size"] = batch
    return GRPOConfig(
        **kw, num_generations=o.num_generations, max_completion_length=o.max_completion_length,
        loss_type=o.loss_type, beta=o.beta, epsilon=o.epsilon, epsilon_high=o.epsilon_high,
        temperature=o.temperature, mask_truncated_completions=o.loss_type == "dapo", **vllm, **trl_args(config),
    )


def build_grpo(config: TrainConfig, model, tokenizer, ds, eval_ds, out: Path, callbacks, reward_funcs=None):
    from trl import GRPOTrainer

    train_ds = D.grpo_dataset(tokenizer, ds)
    args = grpo_args(config, out)
    if tokenizer.padding_side != "left":
        tokenizer.padding_side = "left"
    return GRPOTrainer(
        model=model, reward_funcs=reward_funcs or default_rewards(tokenizer), args=args, train_dataset=train_ds,
        processing_class=tokenizer, callbacks=callbacks, peft_config=None if _is_peft(model) else peft_config(config),
    )


def _is_peft(model) -> bool:
    return hasattr(model, "peft_config")


BUILDERS = {"pretrain": build_pretrain, "sft": build_sft, "dpo": build_dpo, "grpo": build_grpo}
