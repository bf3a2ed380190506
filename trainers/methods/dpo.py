"""Direct preference optimisation: TRL's ``DPOTrainer`` on prompt/chosen/rejected rows.

Without PEFT the reference is a frozen copy of the model as it starts; with PEFT, TRL uses the base
with the adapters disabled.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from trainteam.curation import formats as F
from trainteam.curation.formats import PromptFormat, completion_text, prompt_format, prompt_text
from trainteam.trainers.methods.base import TrainingMethod, is_peft
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.trainer_args import common_args, peft_config, trl_args


def _side(value, fmt: PromptFormat):
    """One side of a preference pair: turns for a chat model, ``answer + eos`` text otherwise."""
    if fmt == "chat":
        return (
            [F.clean_message(m) for m in value]
            if isinstance(value, list)
            else [{"role": "assistant", "content": str(value)}]
        )
    return value if isinstance(value, list) else str(value)


def dpo_dataset(tokenizer, ds):
    fmt = prompt_format(tokenizer)

    def fmt_row(r):
        if fmt == "chat":
            return {
                "prompt": F.as_messages(r["prompt"], r.get("system")),
                "chosen": _side(r["chosen"], fmt),
                "rejected": _side(r["rejected"], fmt),
            }
        return {
            "prompt": prompt_text(tokenizer, r["prompt"], system=r.get("system")),
            "chosen": completion_text(tokenizer, F.completion_content(r["chosen"])),
            "rejected": completion_text(tokenizer, F.completion_content(r["rejected"])),
        }

    return ds.map(fmt_row, remove_columns=list(ds.column_names))


def shape(config: TrainConfig, tokenizer, ds):
    return dpo_dataset(tokenizer, ds)


def peft_and_reference(config: TrainConfig, model) -> tuple[Any, Any]:
    """The LoRA config a preference trainer wraps the model in (none for a PEFT model already) and its frozen
    reference: none with PEFT (the adapter off is the reference); without PEFT, TRL would reload the reference
    from model.config._name_or_path, stale or missing for an in-memory model, so a frozen copy is the one we mean."""
    pc = None if is_peft(model) else peft_config(config)
    ref = None if pc is not None or is_peft(model) else copy.deepcopy(model).eval()
    return pc, ref


def build(config: TrainConfig, model, tokenizer, ds, eval_ds, out: Path, callbacks, reward_funcs=None) -> Any:
    from trl import DPOConfig, DPOTrainer

    train_ds = shape(config, tokenizer, ds)
    ev = shape(config, tokenizer, eval_ds) if eval_ds is not None else None
    o = config.dpo
    args = DPOConfig(
        **common_args(config, out, model=model, sequences_per_row=METHOD.sequences_per_row),
        beta=o.beta,
        loss_type=list(o.loss_type),
        precompute_ref_log_probs=o.precompute_ref_log_probs,
        max_length=config.max_length,
        **trl_args(config, DPOConfig, owned=METHOD.trl_owned),
    )
    pc, ref = peft_and_reference(config, model)
    return DPOTrainer(
        model=model,
        ref_model=ref,
        args=args,
        train_dataset=train_ds,
        eval_dataset=ev,
        processing_class=tokenizer,
        callbacks=callbacks,
        peft_config=pc,
    )


def side_tokens(tokenizer, rec: dict, fmt: PromptFormat, side: str) -> int:
    """Tokens of the prompt followed by one side (chosen or rejected) of a preference row."""
    value = rec[side]
    if fmt == "chat":
        turns = (
            [F.clean_message(m) for m in value]
            if isinstance(value, list)
            else [{"role": "assistant", "content": str(value)}]
        )
        prompt = F.as_messages(rec["prompt"], rec.get("system"))
        return len(tokenizer.apply_chat_template(prompt + turns, tokenize=True, return_dict=True)["input_ids"])
    text = F.prompt_text(tokenizer, rec["prompt"], system=rec.get("system"))
    text += F.completion_text(tokenizer, F.completion_content(value))
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def _preference_tokens(tokenizer, rec: dict, fmt: PromptFormat) -> int:
    """A DPO example's two sequences; a prompt/completion row (whose rejected side the align step
    makes from the model's own answer) counts its prompt and answer twice."""
    if rec.get("chosen") is None:
        prompt, answer = F.example(rec)
        rec = {"prompt": prompt, "chosen": answer, "rejected": answer, "system": rec.get("system")}
    return side_tokens(tokenizer, rec, fmt, "chosen") + side_tokens(tokenizer, rec, fmt, "rejected")


def row_tokens(tokenizer, rows: list[dict], fmt: PromptFormat) -> list[int]:
    return [_preference_tokens(tokenizer, r, fmt) for r in rows]


def _holds_reference(cfg: TrainConfig) -> bool:
    return not cfg.dpo.precompute_ref_log_probs


# DPO at 5e-6 full / 5e-5 with LoRA when its block names no rate (TRL's DPO examples and docs use
# 5e-7..5e-6 on full models; LoRA adapters take ~10x).
METHOD = TrainingMethod(
    name="dpo",
    sequences_per_row=2,  # the chosen and the rejected sequence of a row go through one forward
    kind="align",
    trl_config="trl.DPOConfig",
    build=build,
    shape=shape,
    # preference rows, or pair/chat rows the align step turns into pairs from the model's own answers
    columns=(("prompt", "chosen", "rejected"),),
    row_kinds=("preference", "pair", "chat"),
    row_tokens=row_tokens,
    words=r"\bdpo\b|preference",
    default_lr=(5e-6, 5e-5),
    holds_reference=_holds_reference,
    cuts_rows=True,
    row_sequences=2,
    pairs_from_answers=True,
    trl_owned={
        "beta": "dpo.beta",
        "loss_type": "dpo.loss_type",
        "precompute_ref_log_probs": "dpo.precompute_ref_log_probs",
    },
    tool_doc="Direct preference optimisation (TRL DPOTrainer) on chosen/rejected rows: a train_model run whose "
    "last stage is dpo, after the stages in before; registering the model waits for a person.",
)
