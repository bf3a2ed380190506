"""Decontamination: remove training text that overlaps any eval example.

GPT-3 style: an eval example leaks into a training record when they share a word
n-gram (13 by default) of normalized text. Eval examples shorter than ``ngram``
words are matched on their whole word sequence (down to ``min_words``, below which
a collision would be chance, e.g. a single number). A leaking record is cut: the
colliding span plus ``margin_chars`` either side is removed and the remaining
pieces of at least ``min_piece_chars`` are kept as separate records; a record
cut into more than ``max_pieces`` pieces, or with nothing left, is dropped.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from trainteam.curation.text import Words, ngram_hashes, word_hashes

_FILTER_MASK = np.uint64((1 << 22) - 1)
_WORD_RE = re.compile(r"(?:[0-9a-z_]|[^\x00-\x7f])+")


class DecontamConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ngram: int = Field(13, ge=1, le=64)
    min_words: int = Field(3, ge=1, description="eval examples with fewer words are not checked")
    mode: Literal["cut", "drop"] = "cut"
    margin_chars: int = Field(200, ge=0)
    min_piece_chars: int = Field(200, ge=1)
    max_pieces: int = Field(10, ge=1)


def eval_text(example: Mapping) -> str:
    """The text of an eval example: ``text``, or prompt and completion together, so
    ``12+34=`` / ``46`` matches training text that spells out ``12 + 34 = 46``."""
    if "text" in example:
        return str(example["text"])
    if "prompt" in example:
        return f"{example['prompt']} {example.get('completion', '')}"
    raise ValueError(f"eval example {example.get('id', '?')!r}: needs a 'text' or 'prompt' field")


@dataclass
class EvalIndex:
    """Sorted n-gram hashes of every eval example, per n-gram size used."""

    config: DecontamConfig
    names: list[str]  # "eval_set/example_id", by owner index
    grams: dict[int, tuple[np.ndarray, np.ndarray]]  # n -> (sorted hashes, owner index)
    unchecked: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        # One bit per low-bits bucket of the eval n-grams: most training n-grams are
        # rejected by a single gather instead of a binary search.
        self._filters = {}
        for n, (g, _) in self.grams.items():
            bits = np.zeros(_FILTER_MASK + 1, dtype=bool)
            bits[(g & _FILTER_MASK).astype(np.int64)] = True
            self._filters[n] = bits

    @classmethod
    def build(cls, eval_sets: Mapping[str, Iterable[Mapping]], config: DecontamConfig | None = None) -> EvalIndex:
        config = config or DecontamConfig()
        names: list[str] = []
        texts: list[str] = []
        for set_name, examples in eval_sets.items():
            for k, ex in enumerate(examples):
                names.append(f"{set_name}/{ex.get('id', k)}")
                texts.append(eval_text(ex))
        hashes, offsets = word_hashes(texts)
        counts = np.diff(offsets)
        per_n: dict[int, tuple[list[np.ndarray], list[np.ndarray]]] = {}
        unchecked = []
        for owner, count in enumerate(counts.tolist()):
            if count < config.min_words:
                unchecked.append(names[owner])
                continue
            n = min(config.ngram, count)
            words = hashes[offsets[owner] : offsets[owner + 1]]
            g, _ = ngram_hashes(words, np.array([0, count]), n)
            bucket = per_n.setdefault(n, ([], []))
            bucket[0].append(g)
            bucket[1].append(np.full(g.size, owner, dtype=np.int64))
        grams = {}
        for n, (gs, owners) in per_n.items():
            g, o = np.concatenate(gs), np.concatenate(owners)
            order = np.argsort(g, kind="stable")
            grams[n] = (g[order], o[order])
        return cls(config, names, grams, unchecked)

    def find(self, texts: Sequence[str], words: Words | None = None) -> list[list[tuple[int, int, int]]]:
        """For each text, its hits as (first word index, n, eval owner index)."""
        hits: list[list[tuple[int, int, int]]] = [[] for _ in texts]
        if not self.grams or not texts:
            return hits
        hashes, offsets = (words.hashes, words.offsets) if words is not None else word_hashes(texts)
        for n, (sorted_g, owner) in self.grams.items():
            g, g_off = ngram_hashes(hashes, offsets, n)
            maybe = np.flatnonzero(self._filters[n][g & _FILTER_MASK])  # cheap pre-check, no false negatives
            pos = np.searchsorted(sorted_g, g[maybe])
            pos[pos >= sorted_g.size] = 0
            hit = sorted_g[pos] == g[maybe]
            match, pos = maybe[hit], pos[hit]
            if match.size == 0:
                continue
            docs = np.searchsorted(g_off, match, side="right") - 1
            for m, d, p in zip(match.tolist(), docs.tolist(), pos.tolist(), strict=True):
                hits[d].append((m - int(g_off[d]), n, int(owner[p])))
        return hits


@dataclass
class DecontamOutcome:
    kept: list[dict]  # the record unchanged, or its surviving pieces
    leaked: set[str]  # eval example names found in it
    action: Literal["clean", "cut", "dropped"]


def _word_spans(text: str) -> list[tuple[int, int]] | None:
    """Char spans of the words as ``word_hashes`` sees them, in ``text``'s own
    coordinates; None when normalization changes lengths (then we drop, not cut)."""
    norm = unicodedata.normalize("NFKC", text).lower()
    if len(norm) != len(text):
        return None
    return [m.span() for m in _WORD_RE.finditer(norm)]


def apply_hits(record: dict, hits: list[tuple[int, int, int]], index: EvalIndex) -> DecontamOutcome:
    if not hits:
        return DecontamOutcome([record], set(), "clean")
    leaked = {index.names[o] for _, _, o in hits}
    cfg = index.config
    text = record["text"]
    spans = _word_spans(text) if cfg.mode == "cut" else None
    if spans is None:
        return DecontamOutcome([], leaked, "dropped")
    cuts = sorted(
        (
            max(0, spans[w][0] - cfg.margin_chars),
            min(len(text), spans[min(w + n, len(spans)) - 1][1] + cfg.margin_chars),
        )
        for w, n, _ in hits
    )
    pieces: list[str] = []
    cursor = 0
    for lo, hi in cuts:
        if lo > cursor:
            pieces.append(text[cursor:lo])
        cursor = max(cursor, hi)
    pieces.append(text[cursor:])
    pieces = [p.strip() for p in pieces if len(p.strip()) >= cfg.min_piece_chars]
    if not pieces or len(pieces) > cfg.max_pieces:
        return DecontamOutcome([], leaked, "dropped")
    kept = [
        {
            **record,
            "id": f"{record['id']}#part{k}",
            "text": p,
            "meta": {**record.get("meta", {}), "cut_from": record["id"]},
        }
        for k, p in enumerate(pieces)
    ]
    return DecontamOutcome(kept, leaked, "cut")


def decontaminate(records: Sequence[dict], index: EvalIndex, words: Words | None = None) -> list[DecontamOutcome]:
    """Check a batch of ``{id, text, meta}`` records against the eval index
    (``words``: their :func:`~trainteam.curation.text.tokenize`, when the caller has it)."""
    hits = index.find([r["text"] for r in records], words)
    return [apply_hits(r, h, index) for r, h in zip(records, hits, strict=True)]
