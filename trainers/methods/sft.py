"""Supervised fine-tuning: TRL's ``SFTTrainer`` on text, prompt/completion or chat rows, the loss on the answers.

The rows are formatted as ``curation/formats.py`` says, so the context a model is trained on is exactly
the context evaluation gives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.curation import formats as F
from trainteam.curation.formats import PromptFormat, completion_text, prompt_format, prompt_text, row_kind
from trainteam.trainers.methods.base import MIXED, TrainingMethod, is_peft, text_lengths
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.trainer_args import common_args, peft_config, trl_args

# A batch is padded to a multiple of 8 tokens (TRL's collator). Every new batch width builds new oneDNN kernels for the
# bf16 matmuls of a CPU, which its primitive cache keeps (up to 1,024), so a run's memory rose with each width it met.
# Measured, LoRA SFT of SmolLM2-135M on a bf16 base, 8 rows a step, 24 steps, ABBA (docs/history.md, "Batches
# padded to a multiple of 8"): dates peak 1,857-1,865 -> 1,658-1,665 MiB, reply 2,002 -> 1,827, the RSS between
# steps flat instead of climbing; 40 dates steps, ABBA x 3: 1.75 s a step (median) against 2.06. A GPU's tensor cores
# want the multiple as well.
PAD_TO_MULTIPLE_OF = 8


def _sft_rows(tokenizer, fmt: PromptFormat, rec: dict) -> list[dict]:
    """One row as SFT rows: text as is; a pair as one prompt/completion; a conversation as one
    prompt/completion per assistant reply (each learned once, in its own context). Chat rows on a
    model with a template are TRL's conversational prompt/completion (lists of turns)."""
    kind = row_kind(rec)
    if kind == "text":
        return [{"text": rec["text"]}]
    tools = rec.get("tools")
    if kind == "chat":
        pairs = F.turns(rec)
    else:
        prompt, completion = F.chat_pair(rec)
        pairs = [(prompt, completion[0])]
    if fmt == "chat":
        rows = [{"prompt": p, "completion": [c]} for p, c in pairs]
        return [{**r, "tools": tools} for r in rows] if tools else rows
    return [
        {"prompt": prompt_text(tokenizer, p), "completion": completion_text(tokenizer, str(c.get("content") or ""))}
        for p, c in pairs
    ]


def _expand(ds, fn):
    """``ds.map`` where one row may become several (a conversation with several replies)."""

    def batch(cols):
        rows = [dict(zip(cols, vals, strict=True)) for vals in zip(*cols.values(), strict=True)]
        out = [r for rec in rows for r in fn(rec)]
        keys = list(dict.fromkeys(k for r in out for k in r))
        return {k: [r.get(k) for r in out] for k in keys}

    return ds.map(batch, batched=True, remove_columns=ds.column_names)


def _calls_tools(ds) -> bool:
    return "messages" in ds.column_names and any(
        m.get("tool_calls") for turns in ds["messages"] for m in turns or [] if isinstance(m, dict)
    )


def sft_dataset(tokenizer, ds):
    """Text, pair or chat rows as SFT rows (loss on the answers), formatted as ``formats.py`` says.
    Rows whose assistant turns call tools need a chat template that writes the calls."""
    fmt = prompt_format(tokenizer)
    if _calls_tools(ds) and not F.renders_tool_calls(tokenizer):
        raise BadInput(
            "data: the rows' assistant turns call tools, and the model's chat template does not write "
            "tool calls (they would be learned as empty answers); give the model a chat template "
            "that renders tool calls and tools (chat_template.jinja in its folder)"
        )
    return _expand(ds, lambda rec: _sft_rows(tokenizer, fmt, rec))


def row_lengths(tokenizer, ds) -> list[int]:
    """Tokens of each SFT row as TRL will tokenize it (``sft_dataset``'s output)."""
    if "text" in ds.column_names:
        return text_lengths(tokenizer, list(ds["text"]))
    if ds and isinstance(ds[0]["prompt"], list):
        tools = ds["tools"] if "tools" in ds.column_names else [None] * len(ds)
        return [
            len(tokenizer.apply_chat_template(p + c, tools=t, tokenize=True, return_dict=True)["input_ids"])
            for p, c, t in zip(ds["prompt"], ds["completion"], tools, strict=True)
        ]
    return text_lengths(tokenizer, [p + c for p, c in zip(ds["prompt"], ds["completion"], strict=True)])


def sft_layout(config: TrainConfig, tokenizer, ds, lengths: list[int] | None = None) -> dict:
    """Packing / padding-free choice when the config leaves it open.

    Rows that vary in length waste most of a padded batch; padding-free (one flattened
    row with position ids) trains only real tokens: 1.4× TRL's padded default on an idle
    CPU here, far more under load (benchmarks/sft_throughput.py). It is exact in training:
    with no KV cache (Trainer sets ``use_cache=False``) transformers detects the reset
    position ids and masks attention between the flattened rows, on sdpa too — padded
    and padding-free SFT give identical losses step for step (tests/methods/test_train_methods.py).
    A forward *with* a cache skips that detection, which is how a check outside training
    can see rows attend to each other. It cannot truncate, so rows longer than
    ``max_length`` fall back to padded batches that TRL truncates. Packing (bfd) fills
    windows with several rows, which changes the number of rows per step, so it is only
    used when asked for.
    """
    packing = bool(config.sft.packing)
    padding_free = config.sft.padding_free
    too_long = not packing and max(lengths or row_lengths(tokenizer, ds)) > config.max_length
    if padding_free is None:
        padding_free = not packing and not too_long
    elif padding_free and too_long:
        raise BadInput(
            f"sft.padding_free: rows longer than max_length={config.max_length} cannot be truncated without packing"
        )
    kw: dict[str, Any] = dict(
        packing=packing, padding_free=padding_free, completion_only_loss=config.sft.completion_only_loss
    )
    if packing:
        kw.update(max_length=config.max_length, packing_strategy="bfd")
    elif padding_free:
        kw.update(max_length=None)
    else:
        kw.update(max_length=config.max_length)
    return kw


def shape(config: TrainConfig, tokenizer, ds):
    return sft_dataset(tokenizer, ds)


def build(config: TrainConfig, model, tokenizer, ds, eval_ds, out: Path, callbacks, reward_funcs=None) -> Any:
    from trl import SFTConfig, SFTTrainer

    train_ds = shape(config, tokenizer, ds)
    ev = shape(config, tokenizer, eval_ds) if eval_ds is not None else None
    lengths = None if config.sft.packing else row_lengths(tokenizer, train_ds)  # packed: windows of max_length
    longest = min(max(lengths, default=1), config.max_length) if lengths is not None else config.max_length
    args = SFTConfig(
        **common_args(config, out, model=model, row_tokens=longest, sequences_per_row=METHOD.sequences_per_row),
        **sft_layout(config, tokenizer, train_ds, lengths),
        dataset_num_proc=None,
        **{
            "pad_to_multiple_of": PAD_TO_MULTIPLE_OF,
            **trl_args(config, SFTConfig, owned=METHOD.trl_owned),
        },  # a trl: block's value wins
    )
    return SFTTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=ev,
        processing_class=tokenizer,
        callbacks=callbacks,
        peft_config=None if is_peft(model) else peft_config(config),
    )


def row_tokens(tokenizer, rows: list[dict], fmt: PromptFormat) -> list[int]:
    """Each SFT example as TRL tokenizes it: a conversation with k replies is k examples."""
    from datasets import Dataset, disable_progress_bars

    disable_progress_bars()  # a sample's map is no progress a person waits for
    return row_lengths(tokenizer, sft_dataset(tokenizer, Dataset.from_list(rows, on_mixed_types=MIXED)))


METHOD = TrainingMethod(
    name="sft",
    kind="train",
    trl_config="trl.SFTConfig",
    build=build,
    shape=shape,
    columns=(("prompt", "completion"), ("messages",), ("text",)),
    row_kinds=("pair", "chat", "text"),
    row_tokens=row_tokens,
    words=r"\bsft\b|fine-?tun\w*|supervised|instruct\w*[- ]tun\w*",
    cuts_rows=True,
    packs=lambda cfg: bool(cfg.sft.packing),  # None: not packed (build)
    searched=True,
    calibrated=True,
    trl_owned={
        "packing": "sft.packing",
        "packing_strategy": "sft.packing",
        "padding_free": "sft.padding_free",
        "completion_only_loss": "sft.completion_only_loss",
        "dataset_num_proc": "(trainteam tokenizes in process)",
    },
    tool_doc="Supervised fine-tuning (TRL SFTTrainer) of a model on prompt/completion or chat rows: a train_model "
    "run whose last stage is sft, under its budget; registering the model waits for a person.",
)
