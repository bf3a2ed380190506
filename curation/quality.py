"""Heuristic quality filters in the style of Gopher (Rae et al. 2021) and C4.

Each filter is a named rule with its own threshold (``None`` switches it off);
a record is dropped by the first rule it fails, and every rule counts what it
dropped, so a report can say why the corpus shrank.

The statistics are computed for a whole batch at once in numpy over the
normalized words of ``text.tokenize`` (runs of letters/digits, lower-cased; so
"Hello," and "hello" are one word and punctuation is not a word); character
counts are UTF-8 bytes. Per-word Python loops and ``Counter``s cost ~0.3 ms a
document, more than dedup and decontamination together.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from trainteam.curation.synthetic import GOPHER_STOP_WORDS
from trainteam.curation.text import Words, ngram_hashes, per_doc_sum, tokenize, word_hashes

_STOP_HASHES = word_hashes(list(GOPHER_STOP_WORDS))[0]


class QualityConfig(BaseModel):
    """Gopher's defaults unless noted; set a field to None to switch that rule off."""

    model_config = ConfigDict(extra="forbid")

    min_words: int | None = Field(50, ge=0)
    max_words: int | None = Field(100_000, ge=1)
    min_mean_word_length: float | None = 3.0
    max_mean_word_length: float | None = 10.0
    max_symbol_word_ratio: float | None = Field(0.1, description="'#' and '...' per word")
    min_alpha_word_fraction: float | None = Field(0.8, description="words with at least one letter")
    max_non_alpha_char_fraction: float | None = Field(
        0.4, description="C4-like: non-space characters that are not letters"
    )
    max_duplicate_line_fraction: float | None = 0.3
    max_top_bigram_char_fraction: float | None = Field(
        0.2, description="chars covered by the most frequent word 2-gram"
    )
    max_duplicate_5gram_char_fraction: float | None = Field(
        0.15, description="chars in word 5-grams that occur more than once"
    )
    min_stop_words: int | None = Field(2, ge=0, description="distinct Gopher stop words present")


def _sorted_runs(grams: np.ndarray, goff: np.ndarray):
    """Group equal n-grams within each document: (order, run starts, run lengths, run doc)."""
    doc = np.repeat(np.arange(goff.size - 1, dtype=np.uint64), np.diff(goff))
    # One sort key: the document in the top 20 bits, 44 bits of the n-gram hash below
    # (a batch holds far fewer than 2^20 documents; 44-bit collisions inside one
    # document are negligible). argsort of one uint64 beats lexsort of two keys ~5x.
    key = (doc << np.uint64(44)) | (grams >> np.uint64(20))
    order = np.argsort(key)
    k = key[order]
    new = np.ones(k.size, dtype=bool)
    new[1:] = k[1:] != k[:-1]
    run_start = np.flatnonzero(new)
    run_len = np.diff(np.append(run_start, k.size))
    return order, run_start, run_len, (k[run_start] >> np.uint64(44)).astype(np.int64)


def _stats(words: Words) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(word lengths, has a letter, per document non-space and non-letter bytes): ``tokenize(stats=True)``'s."""
    lengths, letters, nonspace, nonalpha = words.lengths, words.has_letter, words.doc_nonspace, words.doc_nonalpha
    if lengths is None or letters is None or nonspace is None or nonalpha is None:
        raise ValueError("the quality rules read the word stats: tokenize(texts, stats=True)")
    return lengths, letters, nonspace, nonalpha


def _repetition(words: Words, wlen: np.ndarray, n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    """Per document: (chars in the most frequent bigram x its count, chars in repeated 5-grams),
    both as fractions of the document's word characters (``wlen``: each word's)."""
    off = words.offsets
    counts = np.diff(off)
    total = per_doc_sum(wlen, off).astype(np.float64)
    top = np.zeros(n_docs)
    dup = np.zeros(n_docs)
    first_word = off[:-1]
    # most frequent bigram (documents with >= 2 words)
    g, goff = ngram_hashes(words.hashes, off, 2)
    if g.size:
        order, rs, rl, rd = _sorted_runs(g, goff)
        gram_word = order[rs] - goff[rd] + first_word[rd]  # word index where one occurrence starts
        chars = wlen[gram_word] + wlen[np.minimum(gram_word + 1, wlen.size - 1)]
        score = np.where((rl >= 2) & (counts[rd] >= 2), rl * chars, 0)
        np.maximum.at(top, rd, score.astype(np.float64))
    # repeated 5-grams: mark every word covered by a 5-gram seen twice in its document
    g, goff = ngram_hashes(words.hashes, off, 5)
    if g.size:
        order, rs, rl, rd = _sorted_runs(g, goff)
        repeated_run = np.repeat(rl >= 2, rl) & np.repeat(counts[rd] >= 5, rl)
        grams_sorted_doc = np.repeat(rd, rl)
        pos = order[repeated_run] - goff[grams_sorted_doc[repeated_run]] + first_word[grams_sorted_doc[repeated_run]]
        cover = np.zeros(wlen.size + 1, dtype=np.int64)
        np.add.at(cover, pos, 1)
        np.add.at(cover, pos + 5, -1)
        covered = np.cumsum(cover[:-1]) > 0
        dup = per_doc_sum(np.where(covered, wlen, 0), off).astype(np.float64)
    safe = np.maximum(total, 1)
    return top / safe, dup / safe


def _duplicate_line_fraction(text: str) -> float:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        return 0.0
    return 1.0 - len(set(lines)) / len(lines)


class QualityFilter:
    """Apply the configured rules; ``dropped[rule]`` counts the records each rule removed and
    ``examples[rule]`` keeps the first ``max_examples`` of their ids (when ``batch`` is given ids)."""

    def __init__(self, config: QualityConfig | None = None, max_examples: int = 5):
        self.config = config or QualityConfig()
        self.rules = [name for name, value in self.config.model_dump().items() if value is not None]
        self.dropped: dict[str, int] = dict.fromkeys(self.rules, 0)
        self.examples: dict[str, list[str]] = {rule: [] for rule in self.rules}
        self.max_examples = max_examples
        self.kept = 0

    def _passes(self, texts: Sequence[str], words: Words | None) -> dict[str, np.ndarray]:
        """rule -> boolean array (True = the document passes that rule)."""
        c = self.config
        n = len(texts)
        if words is None or words.lengths is None:
            words = tokenize(texts, stats=True)
        wlen, letters, nonspace, nonalpha = _stats(words)
        n_words = np.diff(words.offsets)
        safe_words = np.maximum(n_words, 1)
        chars = per_doc_sum(wlen, words.offsets)
        out: dict[str, np.ndarray] = {}
        if c.min_words is not None:
            out["min_words"] = n_words >= c.min_words
        if c.max_words is not None:
            out["max_words"] = n_words <= c.max_words
        mean_len = chars / safe_words
        if c.min_mean_word_length is not None:
            out["min_mean_word_length"] = mean_len >= c.min_mean_word_length
        if c.max_mean_word_length is not None:
            out["max_mean_word_length"] = mean_len <= c.max_mean_word_length
        if c.max_symbol_word_ratio is not None:
            symbols = np.fromiter(
                (t.count("#") + t.count("...") + t.count("…") for t in texts), dtype=np.int64, count=n
            )
            out["max_symbol_word_ratio"] = symbols / safe_words <= c.max_symbol_word_ratio
        if c.min_alpha_word_fraction is not None:
            alpha = per_doc_sum(letters, words.offsets)
            out["min_alpha_word_fraction"] = alpha / safe_words >= c.min_alpha_word_fraction
        if c.max_non_alpha_char_fraction is not None:
            frac = nonalpha / np.maximum(nonspace, 1)
            out["max_non_alpha_char_fraction"] = frac <= c.max_non_alpha_char_fraction
        if c.max_duplicate_line_fraction is not None:
            dl = np.fromiter((_duplicate_line_fraction(t) for t in texts), dtype=np.float64, count=n)
            out["max_duplicate_line_fraction"] = dl <= c.max_duplicate_line_fraction
        if c.max_top_bigram_char_fraction is not None or c.max_duplicate_5gram_char_fraction is not None:
            top, dup = _repetition(words, wlen, n)
            if c.max_top_bigram_char_fraction is not None:
                out["max_top_bigram_char_fraction"] = top <= c.max_top_bigram_char_fraction
            if c.max_duplicate_5gram_char_fraction is not None:
                out["max_duplicate_5gram_char_fraction"] = dup <= c.max_duplicate_5gram_char_fraction
        if c.min_stop_words is not None:
            present = sum((per_doc_sum(words.hashes == h, words.offsets) > 0).astype(np.int64) for h in _STOP_HASHES)
            out["min_stop_words"] = np.asarray(present >= c.min_stop_words)
        return out

    def failed_rules(self, texts: Sequence[str], words: Words | None = None) -> list[str | None]:
        """The first rule each text fails, or None if it passes (does not count).
        ``words``: the texts' ``tokenize(texts, stats=True)``, when the caller has it."""
        if not texts:
            return []
        passes = self._passes(texts, words)
        failed: list[str | None] = [None] * len(texts)
        for rule in reversed(self.rules):  # so the first failing rule in order wins
            for i in np.flatnonzero(~passes[rule]).tolist():
                failed[i] = rule
        return failed

    def failed_rule(self, text: str) -> str | None:
        return self.failed_rules([text])[0]

    def batch(self, texts: Sequence[str], words: Words | None = None, ids: Sequence[str] | None = None) -> list[bool]:
        """Keep/drop verdicts for a batch, counted per rule (``ids``: the texts' ids, for the examples)."""
        verdicts = []
        for k, rule in enumerate(self.failed_rules(texts, words)):
            if rule is None:
                self.kept += 1
                verdicts.append(True)
            else:
                self.dropped[rule] += 1
                if ids is not None and len(self.examples[rule]) < self.max_examples:
                    self.examples[rule].append(ids[k])
                verdicts.append(False)
        return verdicts

    def __call__(self, text: str) -> bool:
        return self.batch([text])[0]
