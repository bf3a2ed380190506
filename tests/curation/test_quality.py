"""Quality filters on crafted records: each rule drops what it should and counts it."""

import pytest

from trainteam.curation.quality import QualityConfig, QualityFilter
from trainteam.curation.synthetic import TextWriter

GOOD = TextWriter(seed=3).text(900)
WORDS = GOOD.split()


def _every(k, token):
    """GOOD with ``token`` after every k-th word."""
    return " ".join(w + (f" {token}" if i % k == 0 else "") for i, w in enumerate(WORDS))


CASES = {
    "min_words": " ".join(WORDS[:30]),
    "max_mean_word_length": " ".join(w + "x" * 12 for w in WORDS),
    "max_symbol_word_ratio": _every(4, "#"),
    "min_alpha_word_fraction": _every(3, "1984"),
    "max_non_alpha_char_fraction": " ".join(w + "!?!?" for w in WORDS),
    "max_duplicate_line_fraction": "\n".join([" ".join(WORDS[:20])] * 6 + [" ".join(WORDS[20:40])]),
    "min_stop_words": " ".join(
        w for w in WORDS if w.lower().strip(".,") not in ("the", "be", "to", "of", "and", "that", "have", "with")
    ),
}


def test_good_text_passes_every_rule():
    f = QualityFilter()
    assert f.failed_rule(GOOD) is None


@pytest.mark.parametrize("rule,text", list(CASES.items()))
def test_each_rule_catches_its_defect(rule, text):
    assert QualityFilter().failed_rule(text) == rule


def test_repetition_rules():
    words = GOOD.split()
    repeated = " ".join(words[:60] + words[10:40] * 3)  # a passage repeated: duplicated 5-grams
    f = QualityFilter(QualityConfig(max_top_bigram_char_fraction=None))
    assert f.failed_rule(repeated) == "max_duplicate_5gram_char_fraction"
    spam = " ".join(words[:40] + ["buy now"] * 30)
    assert QualityFilter().failed_rule(spam) == "max_top_bigram_char_fraction"


def test_counts_per_rule_and_switching_rules_off():
    f = QualityFilter()
    texts = [GOOD, CASES["min_words"], CASES["min_words"], CASES["max_symbol_word_ratio"]]
    assert [f(t) for t in texts] == [True, False, False, False]
    assert f.kept == 1 and f.dropped["min_words"] == 2 and f.dropped["max_symbol_word_ratio"] == 1
    assert sum(f.dropped.values()) == 3
    lenient = QualityFilter(QualityConfig(min_words=None, max_symbol_word_ratio=None))
    assert "min_words" not in lenient.dropped
    assert lenient.failed_rule(CASES["max_symbol_word_ratio"]) != "max_symbol_word_ratio"


def test_a_batch_judges_each_text_as_alone():
    texts = [GOOD, *CASES.values(), "", GOOD.upper()]
    f = QualityFilter()
    assert f.failed_rules(texts) == [f.failed_rule(t) for t in texts]
    assert f.failed_rules(texts)[-2] == "min_words"
