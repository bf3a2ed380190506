"""Training data in, method-shaped ``datasets.Dataset`` out.

Every method takes the same three input forms (records, a data file or folder that
``curation.rows`` reads, a ``datasets.Dataset``) and gets its text from ``formats.py``, so
the context a model is trained on is exactly the context evaluation gives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.curation import formats as F
from trainteam.curation.formats import PromptFormat, completion_text, prompt_format, prompt_text, row_kind, text_of
from trainteam.curation.packing import pack_token_stream
from trainteam.curation.rows import read_rows

# Tool calls' arguments and tool schemas differ from row to row: Arrow would merge them into one
# struct and fill every key a row lacks with None (``"execute": null`` in a call that never had it,
# ``"$defs": null`` in a schema), which the chat template then renders. ``use_json`` keeps such
# columns as JSON values, each row's own (datasets' ``Json`` feature).
MIXED = "use_json"

REQUIRED = {
    "pretrain": [("text",), ("prompt", "completion"), ("messages",)],
    "sft": [("prompt", "completion"), ("messages",), ("text",)],
    "dpo": [("prompt", "chosen", "rejected")],
    "grpo": [("prompt", "completion"), ("messages",)],
}


def load_data(data: Any, method: str, name: str = "data"):
    """Return a ``datasets.Dataset`` and check that it has the columns ``method`` needs."""
    from datasets import Dataset

    if isinstance(data, (str, Path)):
        # any file or folder curation.rows reads (JSONL, JSON, CSV, Parquet, a saved dataset), as canonical rows
        records = read_rows(Path(data))
        name = str(data)
        keys = list(dict.fromkeys(k for r in records for k in r))  # every row's columns (from_list takes the first's)
        ds = Dataset.from_list([{k: r.get(k) for k in keys} for r in records], on_mixed_types=MIXED) if records else None
    elif isinstance(data, Dataset):
        ds = data
    elif isinstance(data, (list, tuple)):
        bad = next((i for i, r in enumerate(data) if not isinstance(r, dict)), None)
        if bad is not None:
            raise BadInput(f"{name}[{bad}]: expected a dict record, got {type(data[bad]).__name__}")
        ds = Dataset.from_list(list(data), on_mixed_types=MIXED) if data else None
    else:
        raise BadInput(f"{name}: expected records, a data file or folder, or a datasets.Dataset, got {type(data).__name__}")
    if ds is None or len(ds) == 0:
        raise BadInput(f"{name}: no records")
    cols = set(ds.column_names)
    options = REQUIRED[method]
    if not any(set(opt) <= cols for opt in options):
        want = " or ".join("{" + ", ".join(o) + "}" for o in options)
        raise BadInput(f"{name}: {method} needs fields {want}; found {sorted(cols)}")
    return ds


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
    return [{"prompt": prompt_text(tokenizer, p), "completion": completion_text(tokenizer, str(c.get("content") or ""))}
            for p, c in pairs]


def _expand(ds, fn):
    """``ds.map`` where one row may become several (a conversation with several replies)."""
    def batch(cols):
        rows = [dict(zip(cols, vals)) for vals in zip(*cols.values())]
        out = [r for rec in rows for r in fn(rec)]
        keys = list(dict.fromkeys(k for r in out for k in r))
        return {k: [r.get(k) for r in out] for k in keys}

    return ds.map(batch, batched=True, remove_columns=ds.column_names)


def _calls_tools(ds) -> bool:
    return "messages" in ds.column_names and any(
        m.get("tool_calls") for turns in ds["messages"] for m in turns or [] if isinstance(m, dict))


def sft_dataset(tokenizer, ds):
    """Text, pair or chat rows as SFT rows (loss on the answers), formatted as ``formats.py`` says.
    Rows whose assistant turns call tools need a chat template that writes the calls."""
    fmt = prompt_format(tokenizer)
    if _calls_tools(ds) and not F.renders_tool_calls(tokenizer):
        raise BadInput("data: the rows' assistant turns call tools, and the model's chat template does not write "
                       "tool calls (they would be learned as empty answers); give the model a chat template "
                       "that renders tool calls and tools (chat_template.jinja in its folder)")
    return _expand(ds, lambda rec: _sft_rows(tokenizer, fmt, rec))


def _side(value, fmt: PromptFormat):
    """One side of a preference pair: turns for a chat model, ``answer + eos`` text otherwise."""
    if fmt == "chat":
        return [F.clean_message(m) for m in value] if isinstance(value, list) else [{"role": "assistant", "content": str(value)}]
    return value if isinstance(value, list) else str(value)


def dpo_dataset(tokenizer, ds):
    fmt = prompt_format(tokenizer)

    def fmt_row(r):
        if fmt == "chat":
            return {"prompt": F.as_messages(r["prompt"], r.get("system")),
                    "chosen": _side(r["chosen"], fmt), "rejected": _side(r["rejected"], fmt)}
        return {"prompt": prompt_text(tokenizer, r["prompt"], system=r.get("system")),
                "chosen": completion_text(tokenizer, F.completion_content(r["chosen"])),
                "rejected": completion_text(tokenizer, F.completion_content(r["rejected"]))}

    return ds.map(fmt_row, remove_columns=list(ds.column_names))


def grpo_dataset(tokenizer, ds):
    """Prompts in the training context (turns for a chat model, which TRL renders with the
    template); the reference answer moves to ``answer`` for the rewards."""
    fmt = prompt_format(tokenizer)

    def fmt_row(r):
        prompt, reference = F.example(r)
        if fmt == "chat":
            return {"prompt": F.as_messages(prompt, r.get("system")), "answer": reference}
        return {"prompt": prompt_text(tokenizer, prompt, system=r.get("system")), "answer": reference}

    return ds.map(fmt_row, remove_columns=list(ds.column_names))


def row_lengths(tokenizer, ds) -> list[int]:
    """Tokens of each SFT row as TRL will tokenize it (``sft_dataset``'s output)."""
    if "text" in ds.column_names:
        return [len(ids) for ids in tokenizer(list(ds["text"]), add_special_tokens=False)["input_ids"]]
    if ds and isinstance(ds[0]["prompt"], list):
        tools = ds["tools"] if "tools" in ds.column_names else [None] * len(ds)
        return [len(tokenizer.apply_chat_template(p + c, tools=t, tokenize=True, return_dict=True)["input_ids"])
                for p, c, t in zip(ds["prompt"], ds["completion"], tools)]
    texts = [p + c for p, c in zip(ds["prompt"], ds["completion"])]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]]
