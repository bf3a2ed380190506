"""Training data in, method-shaped ``datasets.Dataset`` out.

Every method takes the same three input forms (records, a data file or folder that
``curation.rows`` reads, a ``datasets.Dataset``) and gets its text from ``formats.py``, so
the context a model is trained on is exactly the context evaluation gives it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.curation.formats import completion_text, prompt_text
from trainteam.curation.packing import pack_token_stream
from trainteam.curation.rows import read_rows

REQUIRED = {
    "pretrain": [("text",), ("prompt", "completion")],
    "sft": [("prompt", "completion"), ("text",)],
    "dpo": [("prompt", "chosen", "rejected")],
    "grpo": [("prompt", "completion")],
}


def load_data(data: Any, method: str, name: str = "data"):
    """Return a ``datasets.Dataset`` and check that it has the columns ``method`` needs."""
    from datasets import Dataset

    if isinstance(data, (str, Path)):
        # any file or folder curation.rows reads (JSONL, JSON, CSV, Parquet, a saved dataset), as canonical rows
        records = read_rows(Path(data))
        name = str(data)
        keys = list(dict.fromkeys(k for r in records for k in r))  # every row's columns (from_list takes the first's)
        ds = Dataset.from_list([{k: r.get(k) for k in keys} for r in records]) if records else None
    elif isinstance(data, Dataset):
        ds = data
    elif isinstance(data, (list, tuple)):
        bad = next((i for i, r in enumerate(data) if not isinstance(r, dict)), None)
        if bad is not None:
            raise BadInput(f"{name}[{bad}]: expected a dict record, got {type(data[bad]).__name__}")
        ds = Dataset.from_list(list(data)) if data else None
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
    """The full training text of one record (prompt context + completion, or raw text)."""
    if rec.get("prompt") is not None and rec.get("completion") is not None:
        return prompt_text(tokenizer, rec["prompt"]) + completion_text(tokenizer, str(rec["completion"]))
    return rec["text"]


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


def sft_dataset(tokenizer, ds):
    """Prompt/completion (loss on the completion) or plain text, formatted as ``formats.py`` says."""
    if "prompt" in ds.column_names and "completion" in ds.column_names:
        def fmt(r):
            return {"prompt": prompt_text(tokenizer, r["prompt"]), "completion": completion_text(tokenizer, str(r["completion"]))}

        keep = ["prompt", "completion"]
    else:
        def fmt(r):
            return {"text": r["text"]}

        keep = ["text"]
    drop = [c for c in ds.column_names if c not in keep]
    return ds.map(fmt, remove_columns=drop)


def dpo_dataset(tokenizer, ds):
    def fmt(r):
        return {
            "prompt": prompt_text(tokenizer, r["prompt"]),
            "chosen": completion_text(tokenizer, str(r["chosen"])),
            "rejected": completion_text(tokenizer, str(r["rejected"])),
        }

    return ds.map(fmt, remove_columns=[c for c in ds.column_names if c not in ("prompt", "chosen", "rejected")])


def grpo_dataset(tokenizer, ds):
    """Prompts in the training context; the reference answer moves to ``answer`` for the rewards."""
    def fmt(r):
        return {"prompt": prompt_text(tokenizer, r["prompt"]), "answer": str(r["completion"])}

    return ds.map(fmt, remove_columns=list(ds.column_names))

