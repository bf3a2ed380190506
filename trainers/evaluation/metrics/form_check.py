"""The form check, learnt from the references: what every right answer of a free-form task must hold.

Two kinds of requirement, both read off the held-out rows, none written by hand for a task:

- **facts**: strings the prompt gives that its own reference repeats — numbers, ids, dates, amounts
  (a token with a digit) and names (a capitalised word that does not open a sentence). A reply that drops
  the order id or the date the customer gave is wrong however well it reads;
- **house phrases**: word sequences (2 to 8 words, compared without case) that (nearly) every reference
  shares — at least ``SHARED`` of them, among at least ``MIN_REFERENCES`` references — such as a greeting
  or a sign-off; only the longest of overlapping ones is kept, at most ``MAX_PHRASES``.

``form_rate`` is the share of answers that hold every requirement of their row (rows with none are not
counted; a task with none at all has no form rate). The misses say which requirement each failing answer
left out. Hand-written: no library learns required content from references; the rule is a few regular
expressions and counts, shown in full on the result.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from pydantic import BaseModel

from trainteam.trainers.evaluation.metrics.metric_spec import AnswerRows, MetricScores, share, words

SHARED = 0.9
MIN_REFERENCES = 8
MAX_PHRASES = 5
PHRASE_WORDS = (2, 8)
_FACT = re.compile(r"[$€£#]?\d(?:[\d,./:-]*\d)?%?|\b[A-Z][\w]*(?:[-'][\w]+)*")
_FUNCTION_WORDS = frozenset(
    "a an the and or but of to in on at for with by from as is are was were be been it its this that these those "
    "i you he she we they me him her us them my your his our their not no do does did have has had will would "
    "can could should may might so if then than there here".split()
)


class FormRule(BaseModel):
    """What the references require: the shared phrases, and each row's facts."""

    phrases: list[str]
    facts: list[list[str]]

    @property
    def empty(self) -> bool:
        return not self.phrases and not any(self.facts)


def _opens_sentence(text: str, start: int) -> bool:
    before = text[:start].rstrip(" \t\"'(")
    return not before or before[-1] in ".!?\n"


def facts_of(prompt: str, reference: str) -> list[str]:
    """The prompt's numbers, ids and names that the reference repeats, in the order the prompt gives them."""
    found: list[str] = []
    for m in _FACT.finditer(prompt):
        token = m.group(0).rstrip(".,:")
        if len(token) < 2 and not token.isdigit():
            continue
        named = not any(c.isdigit() for c in token)
        if named and (_opens_sentence(prompt, m.start()) or token.lower() in _FUNCTION_WORDS):
            continue
        if token not in found and re.search(rf"(?<!\w){re.escape(token)}(?!\w)", reference):
            found.append(token)
    return found


def shared_phrases(references: Sequence[str]) -> list[str]:
    """Word sequences at least ``SHARED`` of the references hold (longest first, no phrase inside another)."""
    if len(references) < MIN_REFERENCES:
        return []
    counts: Counter[tuple[str, ...]] = Counter()
    lo, hi = PHRASE_WORDS
    for ref in references:
        w = words(ref)
        counts.update({tuple(w[i : i + n]) for n in range(lo, hi + 1) for i in range(len(w) - n + 1)})
    need = SHARED * len(references)
    common = [g for g, c in counts.items() if c >= need and not set(g) <= _FUNCTION_WORDS]
    kept: list[tuple[str, ...]] = []
    for g in sorted(common, key=lambda g: (-len(g), -counts[g], g)):
        if not any(_inside(g, k) for k in kept):
            kept.append(g)
    return [" ".join(g) for g in kept[:MAX_PHRASES]]


def _inside(small: tuple[str, ...], big: tuple[str, ...]) -> bool:
    n = len(small)
    return any(big[i : i + n] == small for i in range(len(big) - n + 1))


def learn(rows: AnswerRows) -> FormRule:
    return FormRule(
        phrases=shared_phrases(rows.references),
        facts=[facts_of(p, r) for p, r in zip(rows.prompts, rows.references, strict=True)],
    )


def missing(answer: str, phrases: Sequence[str], facts: Sequence[str]) -> list[str]:
    """The requirements ``answer`` leaves out."""
    have = words(answer)
    out = [f for f in facts if not re.search(rf"(?<!\w){re.escape(f)}(?!\w)", answer)]
    return out + [p for p in phrases if not _inside(tuple(p.split()), have)]


def form_rate(answers: Sequence[str], rows: AnswerRows) -> MetricScores:
    """1 for an answer holding every requirement of its row, 0 otherwise (rows without any are left out)."""
    rule = learn(rows)
    values: list[float] = []
    misses: list[str] = []
    for i, (answer, facts) in enumerate(zip(answers, rule.facts, strict=True)):
        if not facts and not rule.phrases:
            continue
        gone = missing(answer, rule.phrases, facts)
        values.append(0.0 if gone else 1.0)
        if gone and len(misses) < 5:
            misses.append(f"row {i}: missing {', '.join(repr(g) for g in gone)}")
    return MetricScores(values=values, misses=misses, rule=rule.model_dump())


METRICS = (
    share(
        "form_rate",
        "share of answers holding what the references require: the facts the prompt gives that the reference "
        "repeats, and the phrases (nearly) every reference shares",
        reads=("answers", "references", "prompts"),
        judges="free_form",
        score=form_rate,
    ),
)
