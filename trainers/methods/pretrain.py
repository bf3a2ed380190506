"""Pretraining: transformers' ``Trainer`` on fixed windows cut from the packed token stream.

LoRA goes through ``peft.get_peft_model`` (transformers' Trainer takes no ``peft_config``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.curation.formats import PromptFormat, prompt_format, text_of
from trainteam.curation.packing import pack_token_stream
from trainteam.trainers.methods.base import TrainingMethod, is_peft, text_lengths
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.trainer_args import common_args, peft_config, trl_args

TRL_CONFIG = "transformers.TrainingArguments"


def record_text(tokenizer, rec: dict) -> str:
    """The full training text of one record, rendered as training renders it (``formats.text_of``)."""
    return text_of(tokenizer, rec, prompt_format(tokenizer))


def packed_windows(tokenizer, ds, seq_len: int):
    """Concatenate all texts (each closed by one EOS) and cut fixed ``seq_len`` windows for pretraining.

    The packing is the data engine's ``pack_token_stream`` (one implementation for both);
    a text that already ends in EOS (a completion does) has it stripped first so that
    the stream closes it once, and the last, partial window is dropped.
    """
    from datasets import Dataset

    eos = tokenizer.eos_token_id
    ids = tokenizer([record_text(tokenizer, rec) for rec in ds], add_special_tokens=False)["input_ids"]
    seqs = [s[:-1] if s and s[-1] == eos else s for s in ids]
    windows = list(pack_token_stream(seqs, seq_len, eos)) if seq_len > 1 else []
    if not windows:
        total = sum(len(s) + 1 for s in seqs)
        raise BadInput(f"data: {total} tokens are fewer than one window of seq_len={seq_len}")
    return Dataset.from_dict({"input_ids": windows, "labels": [list(w) for w in windows]})


def shape(config: TrainConfig, tokenizer, ds):
    return packed_windows(tokenizer, ds, config.max_length)


def build(config: TrainConfig, model, tokenizer, ds, eval_ds, out: Path, callbacks, reward_funcs=None) -> Any:
    from transformers import Trainer, TrainingArguments, default_data_collator

    train_ds = shape(config, tokenizer, ds)
    ev = shape(config, tokenizer, eval_ds) if eval_ds is not None else None
    pc = None if is_peft(model) else peft_config(config)
    if pc is not None:
        from peft import get_peft_model

        model = get_peft_model(model, pc)
    args = TrainingArguments(
        **common_args(config, out, model=model, sequences_per_row=METHOD.sequences_per_row),
        remove_unused_columns=False,
        **trl_args(config, TrainingArguments, owned=METHOD.trl_owned),
    )
    return Trainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=ev,
        processing_class=tokenizer,
        data_collator=default_data_collator,
        callbacks=callbacks,
    )


def row_tokens(tokenizer, rows: list[dict], fmt: PromptFormat) -> list[int]:
    """Each row's text, closed by one EOS in the packed stream."""
    return [n + 1 for n in text_lengths(tokenizer, [text_of(tokenizer, r, fmt) for r in rows])]


METHOD = TrainingMethod(
    name="pretrain",
    kind="train",
    trl_config=TRL_CONFIG,
    build=build,
    shape=shape,
    columns=(("text",), ("prompt", "completion"), ("messages",)),
    row_kinds=("text", "pair", "chat"),
    row_tokens=row_tokens,
    words=r"pre-?train\w*|from[- ]scratch|random init\w*",
    eval_kind="pretrain",
    packs=lambda _cfg: True,
    from_scratch=True,
    searched=True,
    calibrated=True,
    tool="pretrain_model",
    trl_owned={"remove_unused_columns": "(pretraining feeds packed windows)"},
    tool_doc="Pretrain a model (from scratch, or continue model.path) on text rows: a train_model run with one "
    "pretrain stage, under its budget; registering the model waits for a person.",
)
