"""ROUGE-L and chrF of greedy answers against their references: the field's free-form scores, computed by
the field's libraries (``rouge-score``, Google's re-implementation of ROUGE-1.5.5; ``sacrebleu``'s chrF).

Both are a mean of per-row scores in [0, 1] (chrF's 0-100 divided by 100), so their noise is a bootstrap
over rows. They judge free-form answers (replies, summaries, rewrites), where a reply worded differently
from its reference is not wrong: exact match reads chance there.
"""

from __future__ import annotations

from collections.abc import Sequence

from trainteam.trainers.evaluation.metrics.metric_spec import AnswerRows, MetricScores, share


def _low(values: list[float], answers: Sequence[str], rows: AnswerRows, name: str) -> list[str]:
    worst = sorted(range(len(values)), key=lambda i: values[i])[:3]
    return [f"row {i}: {name} {values[i]:.2f}: {answers[i][:80]!r} vs {rows.references[i][:80]!r}" for i in worst]


def rouge_l(answers: Sequence[str], rows: AnswerRows) -> MetricScores:
    """ROUGE-L F1 of each answer against its reference (``rouge_score``, no stemming: a house style's wording
    counts as written)."""
    from rouge_score import rouge_scorer  # seam: rouge-score imports nltk (~1.5 s)

    scorer = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False)
    values = [scorer.score(ref, ans)["rougeL"].fmeasure for ans, ref in zip(answers, rows.references, strict=True)]
    return MetricScores(values=values, misses=_low(values, answers, rows, "ROUGE-L"))


def chrf(answers: Sequence[str], rows: AnswerRows) -> MetricScores:
    """Sentence chrF (character n-gram F-score, ``sacrebleu``'s defaults: n 6, beta 2) of each answer, / 100."""
    from sacrebleu.metrics import CHRF  # seam: sacrebleu imports its tokenizers

    metric = CHRF()
    values = [metric.sentence_score(ans, [ref]).score / 100 for ans, ref in zip(answers, rows.references, strict=True)]
    return MetricScores(values=values, misses=_low(values, answers, rows, "chrF"))


METRICS = (
    share(
        "rouge_l",
        "ROUGE-L F1 of the greedy answer against the reference (rouge-score), mean over rows",
        reads=("answers", "references"),
        noise="bootstrap",
        judges="free_form",
        score=rouge_l,
    ),
    share(
        "chrf",
        "chrF of the greedy answer against the reference (sacrebleu), / 100, mean over rows",
        reads=("answers", "references"),
        noise="bootstrap",
        judges="free_form",
        score=chrf,
    ),
)
