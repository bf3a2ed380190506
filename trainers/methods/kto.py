"""Kahneman-Tversky optimisation: TRL's ``KTOTrainer`` on answers marked desirable or not.

Rows are either unpaired (``prompt``, ``completion``, ``label``: true for a desirable answer) or
preference pairs (``prompt``, ``chosen``, ``rejected``), which TRL unpairs into one desirable and one
undesirable row. KTO's own settings (``beta``, ``desirable_weight``, ``undesirable_weight``, ``loss_type``)
go in the stage's ``trl:`` block. Its KL estimate pairs each completion with another row's prompt in the
batch, so a batch holds at least two rows. Without PEFT the reference is a frozen copy of the model as it
starts, as for DPO.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.curation import formats as F
from trainteam.curation.formats import PromptFormat, completion_text, prompt_format, prompt_text
from trainteam.trainers.methods.base import TrainingMethod
from trainteam.trainers.methods.dpo import dpo_dataset, peft_and_reference, side_tokens
from trainteam.trainers.methods.dpo import row_tokens as preference_tokens
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.trainer_args import common_args, trl_args


def kto_dataset(tokenizer, ds):
    """Labelled answers in the training context (turns for a chat model); pairs as DPO shapes them."""
    if "chosen" in ds.column_names:
        return dpo_dataset(tokenizer, ds)
    fmt = prompt_format(tokenizer)

    def fmt_row(r):
        content = F.completion_content(r["completion"])
        if fmt == "chat":
            return {
                "prompt": F.as_messages(r["prompt"], r.get("system")),
                "completion": [{"role": "assistant", "content": content}],
                "label": bool(r["label"]),
            }
        return {
            "prompt": prompt_text(tokenizer, r["prompt"], system=r.get("system")),
            "completion": completion_text(tokenizer, content),
            "label": bool(r["label"]),
        }

    return ds.map(fmt_row, remove_columns=list(ds.column_names))


def shape(config: TrainConfig, tokenizer, ds):
    return kto_dataset(tokenizer, ds)


def build(config: TrainConfig, model, tokenizer, ds, eval_ds, out: Path, callbacks, reward_funcs=None) -> Any:
    from trl import KTOConfig, KTOTrainer

    train_ds = shape(config, tokenizer, ds)
    ev = shape(config, tokenizer, eval_ds) if eval_ds is not None else None
    args = KTOConfig(
        **common_args(config, out), max_length=config.max_length, **trl_args(config, KTOConfig, owned=METHOD.trl_owned)
    )
    pc, ref = peft_and_reference(config, model)
    return KTOTrainer(
        model=model,
        ref_model=ref,
        args=args,
        train_dataset=train_ds,
        eval_dataset=ev,
        processing_class=tokenizer,
        callbacks=callbacks,
        peft_config=pc,
    )


def row_tokens(tokenizer, rows: list[dict], fmt: PromptFormat) -> list[int]:
    """A labelled answer: its prompt and completion; a pair: both of its sequences."""
    return [
        side_tokens(tokenizer, r, fmt, "completion")
        if r.get("chosen") is None
        else preference_tokens(tokenizer, [r], fmt)[0]
        for r in rows
    ]


# TRL's KTOConfig trains at 1e-6; LoRA adapters take ~10x (as for DPO).
METHOD = TrainingMethod(
    name="kto",
    sequences_per_row=None,  # the KL term pairs rows inside a forward: never split
    kind="align",
    trl_config="trl.KTOConfig",
    build=build,
    shape=shape,
    columns=(("prompt", "completion", "label"), ("prompt", "chosen", "rejected")),
    row_kinds=("preference", "pair"),
    row_tokens=row_tokens,
    words=r"\bkto\b|kahneman",
    default_lr=(1e-6, 1e-5),
    holds_reference=lambda cfg: not cfg.trl.get("precompute_ref_log_probs", False),
    cuts_rows=True,  # KTOConfig.max_length: TRL cuts a longer sequence from the right
    row_sequences=2,  # a pair's chosen and rejected answers
    tool_doc="Kahneman-Tversky optimisation (TRL KTOTrainer) on answers labelled desirable or not (or "
    "chosen/rejected pairs): a train_model run whose last stage is kto, after the stages in before; "
    "registering the model waits for a person.",
)
