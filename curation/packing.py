"""Packing tokenized records into training rows.

Pretraining: every record's tokens closed by EOS, concatenated, cut into fixed
windows (streaming; the remainder is kept or dropped). SFT: prompt/completion
pairs tokenized with the shared ``formats.py`` text into ``input_ids`` and
``labels`` (-100 on the prompt), the columns SFTTrainer's own preparation ends
with, then packed by TRL's ``pack_dataset`` (best-fit decreasing keeps examples
whole), which adds the ``seq_lengths`` column that TRL's padding-free collator
turns into per-example ``position_ids``. Such a dataset trains with
``SFTConfig(padding_free=True, dataset_kwargs={"skip_prepare_dataset": True})``.
A tokenizer is passed in, never imported here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal

from trainteam.core.errors import BadInput
from trainteam.curation.formats import completion_text, prompt_text


def pack_token_stream(
    sequences: Iterable[list[int]], window: int, eos_id: int, *, keep_remainder: bool = False
) -> Iterator[list[int]]:
    """Yield ``window``-long rows of ``seq + [eos]`` for each sequence, concatenated.

    The rows, joined, are exactly the sequences each followed by EOS (the last, shorter
    row only with ``keep_remainder``), so nothing is lost or reordered."""
    if window < 2:
        raise BadInput(f"window: must be at least 2 tokens, got {window}")
    buf: list[int] = []
    for seq in sequences:
        buf.extend(seq)
        buf.append(eos_id)
        while len(buf) >= window:
            yield buf[:window]
            del buf[:window]
    if keep_remainder and buf:
        yield buf


def _eos_id(tokenizer: Any) -> int:
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None:
        raise BadInput("tokenizer: has no eos_token; packing needs one to separate documents")
    return int(eos)


def pack_texts(
    texts: Iterable[str], tokenizer: Any, window: int, *, batch_size: int = 256, keep_remainder: bool = False
) -> Iterator[list[int]]:
    """Tokenize texts in batches (no special tokens added) and pack them (see :func:`pack_token_stream`)."""

    def tokenized() -> Iterator[list[int]]:
        batch: list[str] = []
        for t in texts:
            batch.append(t)
            if len(batch) == batch_size:
                yield from tokenizer(batch, add_special_tokens=False)["input_ids"]
                batch = []
        if batch:
            yield from tokenizer(batch, add_special_tokens=False)["input_ids"]

    return pack_token_stream(tokenized(), window, _eos_id(tokenizer), keep_remainder=keep_remainder)


def tokenize_sft(records: Iterable[dict], tokenizer: Any) -> list[dict]:
    """``{input_ids, labels}`` per prompt/completion record (loss on the completion only),
    with the separator and EOS that training and evaluation use (``curation/formats.py``)."""
    out = []
    for i, rec in enumerate(records):
        if "prompt" not in rec or "completion" not in rec:
            raise BadInput(f"records[{i}]: SFT packing needs 'prompt' and 'completion'")
        p = tokenizer(prompt_text(tokenizer, rec["prompt"]), add_special_tokens=False)["input_ids"]
        c = tokenizer(completion_text(tokenizer, str(rec["completion"])), add_special_tokens=False)["input_ids"]
        out.append({"input_ids": p + c, "labels": [-100] * len(p) + c})
    return out


def pack_sft(
    records: Iterable[dict], tokenizer: Any, seq_length: int, strategy: Literal["bfd", "bfd_split", "wrapped"] = "bfd"
):
    """A ``datasets.Dataset`` of packed SFT rows (``input_ids``, ``labels``, ``seq_lengths``),
    as TRL's ``pack_dataset`` builds them for SFTTrainer's packing / padding-free collator."""
    from datasets import Dataset
    from trl.data_utils import pack_dataset

    rows = tokenize_sft(records, tokenizer)
    if not rows:
        raise BadInput("records: nothing to pack")
    return pack_dataset(Dataset.from_list(rows), seq_length, strategy=strategy)
