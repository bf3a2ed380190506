"""Tokens per training example, counted with the task's own tokenizer on a sample of its rows.

A byte-level BPE never makes more tokens than a text has UTF-8 bytes, so a row's bytes plus
BOS and EOS bound its tokens (``row_tokens_bound``), and that bound is all a run has before
its tokenizer exists (the project's own tokenizers are trained by the run): the demo's
11-token rows at seq_len 64 were otherwise counted as 64 tokens each. A local model's
tokenizer exists before the run: on SmolLM2's 49k vocabulary the bound counted 2.7x too many
tokens. Here a sample is tokenized the way the trainer will tokenize it
(each method's ``row_tokens``, ``trainers/methods/``: SFT rows through ``sft_dataset`` and ``row_lengths``, a
chat model's rows through its chat template), so the planner's tokens are the trainer's.

Counts are per training *example*: an SFT conversation with k assistant replies is k examples
(each learned once, in its own context), a DPO example is its chosen and its rejected sequence.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from trainteam.core.errors import BadInput
from trainteam.curation import formats as F
from trainteam.curation.rows import read_rows
from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.training.chat_templates import apply_chat_template
from trainteam.trainers.training.tokenizer import load_tokenizer

SAMPLE_ROWS = 256
TEXT_FIELDS = ("prompt", "completion", "text")
TURN_FIELDS = ("messages", "chosen", "rejected")


class RowTokens(BaseModel):
    """What a sample of the training rows holds, in the tokens the trainer computes on."""

    sampled_rows: int = Field(ge=0)
    lengths: list[int] = Field(default_factory=list, description="tokens of each training example of the sample")
    source: Literal["tokenizer", "bytes"] = "tokenizer"
    prompt_format: str | None = Field(default=None, description="chat (the model's template) or plain")

    @property
    def examples_per_row(self) -> float:
        return len(self.lengths) / self.sampled_rows if self.sampled_rows else 1.0

    @property
    def longest(self) -> int:
        return max(self.lengths, default=0)

    def mean(self, seq_len: int | None = None, per_sequence: int = 1) -> float:
        """Mean tokens per example; with ``seq_len``, each of its ``per_sequence`` sequences cut there
        (what truncation leaves to compute on)."""
        if not self.lengths:
            return 0.0
        if seq_len is None:
            return sum(self.lengths) / len(self.lengths)
        return sum(min(n, seq_len * per_sequence) for n in self.lengths) / len(self.lengths)

    def describe(self) -> str:
        how = "counted with the model's tokenizer" if self.source == "tokenizer" else "bounded by UTF-8 bytes"
        fmt = f", {self.prompt_format} format" if self.prompt_format else ""
        return (
            f"{len(self.lengths)} examples from a {self.sampled_rows}-row sample: mean {self.mean():.1f} tokens, "
            f"longest {self.longest} ({how}{fmt})"
        )


@lru_cache(maxsize=4)
def model_tokenizer(path: str, chat_template: str | None = None):
    """The tokenizer of a local model folder (loaded once per process), with the task's
    ``model.chat_template`` on it when given (trainers/training/chat_templates.py)."""
    tok = load_tokenizer(Path(path))
    if chat_template:
        apply_chat_template(tok, chat_template)
    return tok


def count_tokens(tokenizer, rows: list[dict], method: str) -> RowTokens:
    """Each training example's tokens as ``method``'s trainer tokenizes it (see the module's docstring)."""
    fmt = F.prompt_format(tokenizer)
    if not rows:
        return RowTokens(sampled_rows=0, prompt_format=fmt)
    lengths = get_method(method).row_tokens(tokenizer, rows, fmt)
    return RowTokens(sampled_rows=len(rows), lengths=lengths, source="tokenizer", prompt_format=fmt)


def bytes_bound(rows: list[dict], method: str = "sft") -> RowTokens:
    """Without a tokenizer: each row's UTF-8 bytes + BOS and EOS, an upper bound for a byte-level BPE
    (times the sequences a row spans: a preference pair's two)."""
    times = get_method(method).row_sequences
    return RowTokens(sampled_rows=len(rows), lengths=[times * (row_bytes(r) + 2) for r in rows], source="bytes")


def row_bytes(rec: dict) -> int:
    """UTF-8 bytes of a row's text: prompt, completion and text, and the turns' contents of a chat
    or preference row (``prompt`` given as turns too)."""
    n = 0
    for key in (*TEXT_FIELDS, *TURN_FIELDS):
        value = rec.get(key)
        if isinstance(value, list):
            n += sum(len(str(m.get("content") or "").encode()) for m in value if isinstance(m, dict))
        elif value is not None:
            n += len(str(value).encode())
    return n


def row_tokens_bound(rows: Iterable[dict]) -> float | None:
    """Mean of ``row_bytes`` + 2 (BOS, EOS) over ``rows``; None if they hold no text."""
    sizes = [row_bytes(r) for r in rows if isinstance(r, dict)]
    if not any(sizes):
        return None
    return sum(sizes) / len(sizes) + 2


def file_row_tokens(path: str | Path, limit: int = SAMPLE_ROWS) -> float | None:
    """``row_tokens_bound`` of a data file's first ``limit`` rows (any format ``curation.rows``
    reads); None if it cannot be read (the data checks report that with their own message)."""
    try:
        return row_tokens_bound(read_rows(Path(path), limit=limit))
    except (BadInput, OSError, TypeError, ValueError):
        return None
