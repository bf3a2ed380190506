"""Which ruler fits a task's answers: exact (one right string a row) or free-form (the wording varies).

Decided from the references themselves, before anything is measured, and said with its reasons:

- the task's answer rule is a regex, a set of labels or a verifier → **exact** (the task says how to check);
- the task names its metrics (``eval.metrics``) → they judge, whatever the references look like;
- answers are long (the median reference holds ``LONG_WORDS`` or more words) → **free-form**: a reply,
  a summary or a rewrite has many right wordings;
- near-identical prompts have different references (the same prompt, case, spacing and punctuation aside)
  → **free-form**: the references disagree, so no one string is the right one;
- otherwise → **exact** (short answers, one each).

Exact answers are judged by exact match (and format adherence); free-form ones by answer-only held-out loss,
ROUGE-L, chrF and the form check learnt from the references (``metrics/form_check.py``); exact match is
still reported there, and never gates or ranks. Text rows (no answers) are judged by held-out loss alone.
"""

from __future__ import annotations

import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, Field

from trainteam.curation.answers import AnswerSpec
from trainteam.curation.formats import example, row_kind
from trainteam.trainers.evaluation.metrics.metric_registry import METRICS
from trainteam.trainers.evaluation.metrics.metric_spec import prompt_words, words

LONG_WORDS = 10
StyleKind = Literal["exact", "free_form", "text"]
JUDGES: dict[StyleKind, tuple[str, ...]] = {
    "exact": ("exact_match", "format_adherence"),
    "free_form": ("heldout_loss", "rouge_l", "chrf", "form_rate"),
    "text": ("heldout_loss",),
}
REPORTED: dict[StyleKind, tuple[str, ...]] = {
    "exact": ("heldout_loss",),
    "free_form": ("exact_match", "stop_rate", "repetition_rate"),
    "text": (),
}


class AnswerStyle(BaseModel):
    """The kind of answers a task has, the metrics that judge them, and why."""

    kind: StyleKind
    reasons: list[str]
    judged_by: list[str] = Field(description="the metrics the gate and the search may read")
    reported: list[str] = Field(default_factory=list, description="measured and shown, never deciding")
    named: bool = Field(default=False, description="the task named the judging metrics (eval.metrics)")

    @property
    def free_form(self) -> bool:
        return self.kind == "free_form"

    def line(self) -> str:
        head = "free-form" if self.free_form else self.kind
        also = f"; reported, never deciding: {', '.join(self.reported)}" if self.reported else ""
        return f"answers: {head} ({'; '.join(self.reasons)}) -> judged by {', '.join(self.judged_by)}{also}"


def _norm(prompt: str) -> str:
    return re.sub(r"[\W_]+", " ", prompt.lower()).strip()


def answer_style(rows: Sequence[dict], answer: AnswerSpec, named: Sequence[str] | None = None) -> AnswerStyle:
    """The style of ``rows`` (pair or chat rows; others are text) under the task's ``answer`` rule."""
    pairs = [example(r) for r in rows if row_kind(r) in ("pair", "chat")]
    kind, reasons = _kind(pairs, answer)
    judged = list(JUDGES[kind])
    if named:
        reasons.append(f"the task names its metrics: {', '.join(named)}")
        judged = list(named)
    reported = [m for m in dict.fromkeys(REPORTED[kind] + JUDGES[kind]) if m not in judged and m in METRICS]
    return AnswerStyle(kind=kind, reasons=reasons, judged_by=judged, reported=reported, named=bool(named))


def _kind(pairs: list[tuple], answer: AnswerSpec) -> tuple[StyleKind, list[str]]:
    if not pairs:
        return "text", ["text rows: no answers to check"]
    if answer.kind != "exact":
        return "exact", [f"the task's answer rule is {answer.kind}"]
    lengths = [len(words(ref)) for _, ref in pairs]
    median = statistics.median(lengths)
    if median >= LONG_WORDS:
        return "free_form", [f"long answers: the median reference holds {median:g} words (>= {LONG_WORDS})"]
    answers_of: dict[str, set[str]] = defaultdict(set)
    for prompt, ref in pairs:
        answers_of[_norm(prompt_words(prompt))].add(ref.strip())
    split = sum(1 for refs in answers_of.values() if len(refs) > 1)
    if split:
        return "free_form", [f"references disagree: {split} prompt(s) appear with different answers"]
    return "exact", [f"short answers, one each: the median reference holds {median:g} words"]
