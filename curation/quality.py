"""Heuristic quality filters in the style of Gopher (Rae et al. 2021) and C4.

Each filter is a named rule with its own threshold (``None`` switches it off);
a record is dropped by the first rule it fails, and every rule counts what it
dropped, so a report can say why the corpus shrank.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from typing import Callable

from pydantic import BaseModel, ConfigDict, Field

from trainteam.curation.synthetic import GOPHER_STOP_WORDS

_NO_ALPHA_WORD = re.compile(r"(?<!\S)(?:[^\w\s]|[\d_])+(?!\S)")  # a word without any letter
_GOPHER_STOP = frozenset(GOPHER_STOP_WORDS)
_DROP_ASCII_LETTERS_AND_SPACE = str.maketrans("", "", string.ascii_letters + string.whitespace)
_PUNCT_TO_SPACE = str.maketrans(string.punctuation, " " * len(string.punctuation))


class QualityConfig(BaseModel):
    """Gopher's defaults unless noted; set a field to None to switch that rule off."""

    model_config = ConfigDict(extra="forbid")

    min_words: int | None = Field(50, ge=0)
    max_words: int | None = Field(100_000, ge=1)
    min_mean_word_length: float | None = 3.0
    max_mean_word_length: float | None = 10.0
    max_symbol_word_ratio: float | None = Field(0.1, description="'#' and '...' per word")
    min_alpha_word_fraction: float | None = Field(0.8, description="words with at least one letter")
    max_non_alpha_char_fraction: float | None = Field(0.4, description="C4-like: characters that are not letters or spaces")
    max_duplicate_line_fraction: float | None = 0.3
    max_top_bigram_char_fraction: float | None = Field(0.2, description="chars covered by the most frequent word 2-gram")
    max_duplicate_5gram_char_fraction: float | None = Field(0.15, description="chars in word 5-grams that occur more than once")
    min_stop_words: int | None = Field(2, ge=0, description="distinct Gopher stop words present")


def _words(text: str) -> list[str]:
    return text.split()


def _chars(words: list[str]) -> int:
    return len("".join(words))


def _mean_word_length(words: list[str]) -> float:
    return _chars(words) / max(1, len(words))


def _symbol_ratio(text: str, words: list[str]) -> float:
    return (text.count("#") + text.count("...") + text.count("…")) / max(1, len(words))


def _alpha_word_fraction(text: str, words: list[str]) -> float:
    return 1.0 - len(_NO_ALPHA_WORD.findall(text)) / max(1, len(words))


def _non_alpha_char_fraction(text: str, words: list[str]) -> float:
    body = _chars(words)
    rest = text.translate(_DROP_ASCII_LETTERS_AND_SPACE)  # C speed; few chars survive
    return sum(1 for c in rest if not c.isalpha() and not c.isspace()) / max(1, body)


def _duplicate_line_fraction(text: str) -> float:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        return 0.0
    return 1.0 - len(set(lines)) / len(lines)


def _top_bigram_char_fraction(words: list[str]) -> float:
    if len(words) < 2:
        return 0.0
    counts = Counter(zip(words, words[1:]))
    (a, b), n = counts.most_common(1)[0]
    if n < 2:
        return 0.0
    return n * (len(a) + len(b)) / max(1, _chars(words))


def _duplicate_5gram_char_fraction(words: list[str]) -> float:
    if len(words) < 5:
        return 0.0
    grams = list(zip(*(words[k:] for k in range(5))))
    counts = Counter(grams)
    if len(counts) == len(grams):
        return 0.0
    covered = [False] * len(words)
    for i, g in enumerate(grams):
        if counts[g] > 1:
            for k in range(i, i + 5):
                covered[k] = True
    return sum(len(w) for w, c in zip(words, covered) if c) / max(1, _chars(words))


def _stop_words(text: str) -> int:
    return len(_GOPHER_STOP.intersection(text.lower().translate(_PUNCT_TO_SPACE).split()))


Rule = Callable[[str, list[str]], bool]


def _rules(cfg: QualityConfig) -> list[tuple[str, Rule]]:
    rules: list[tuple[str, Rule]] = []
    c = cfg
    if c.min_words is not None:
        rules.append(("min_words", lambda t, w: len(w) >= c.min_words))
    if c.max_words is not None:
        rules.append(("max_words", lambda t, w: len(w) <= c.max_words))
    if c.min_mean_word_length is not None:
        rules.append(("min_mean_word_length", lambda t, w: _mean_word_length(w) >= c.min_mean_word_length))
    if c.max_mean_word_length is not None:
        rules.append(("max_mean_word_length", lambda t, w: _mean_word_length(w) <= c.max_mean_word_length))
    if c.max_symbol_word_ratio is not None:
        rules.append(("max_symbol_word_ratio", lambda t, w: _symbol_ratio(t, w) <= c.max_symbol_word_ratio))
    if c.min_alpha_word_fraction is not None:
        rules.append(("min_alpha_word_fraction", lambda t, w: _alpha_word_fraction(t, w) >= c.min_alpha_word_fraction))
    if c.max_non_alpha_char_fraction is not None:
        rules.append(("max_non_alpha_char_fraction", lambda t, w: _non_alpha_char_fraction(t, w) <= c.max_non_alpha_char_fraction))
    if c.max_duplicate_line_fraction is not None:
        rules.append(("max_duplicate_line_fraction", lambda t, w: _duplicate_line_fraction(t) <= c.max_duplicate_line_fraction))
    if c.max_top_bigram_char_fraction is not None:
        rules.append(("max_top_bigram_char_fraction", lambda t, w: _top_bigram_char_fraction(w) <= c.max_top_bigram_char_fraction))
    if c.max_duplicate_5gram_char_fraction is not None:
        rules.append(
            ("max_duplicate_5gram_char_fraction", lambda t, w: _duplicate_5gram_char_fraction(w) <= c.max_duplicate_5gram_char_fraction)
        )
    if c.min_stop_words is not None:
        rules.append(("min_stop_words", lambda t, w: _stop_words(t) >= c.min_stop_words))
    return rules


class QualityFilter:
    """Apply the configured rules; ``dropped[rule]`` counts the records each rule removed."""

    def __init__(self, config: QualityConfig | None = None):
        self.config = config or QualityConfig()
        self.rules = _rules(self.config)
        self.dropped: dict[str, int] = {name: 0 for name, _ in self.rules}
        self.kept = 0

    def failed_rule(self, text: str) -> str | None:
        """The first rule the text fails, or None if it passes (does not count)."""
        words = _words(text)
        for name, ok in self.rules:
            if not ok(text, words):
                return name
        return None

    def __call__(self, text: str) -> bool:
        rule = self.failed_rule(text)
        if rule is None:
            self.kept += 1
            return True
        self.dropped[rule] += 1
        return False


__all__ = ["QualityConfig", "QualityFilter"]
