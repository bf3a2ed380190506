"""The metrics the battery measures itself (loss, exact match, the reliability checks): their records.

How each is computed lives in ``trainers/evaluation/battery.py``; here is what each means to a gate.
"""

from __future__ import annotations

from trainteam.trainers.evaluation.metrics.metric_spec import MetricSpec

METRICS = (
    MetricSpec(
        name="heldout_loss",
        description="mean cross-entropy on the held-out answer tokens only (the assistant's turn, as SFT trains)",
        higher_is_better=False,
        low=0.0,
        reads=("loss", "references", "model"),
        noise="loss",
    ),
    MetricSpec(
        name="perplexity",
        description="exp(held-out loss)",
        higher_is_better=False,
        low=1.0,
        reads=("loss", "references", "model"),
        noise="loss",
    ),
    MetricSpec(
        name="exact_match",
        description="share of greedy answers the task's answer rule scores right (one right string a row)",
        higher_is_better=True,
        low=0.0,
        high=1.0,
        reads=("answers", "references"),
        noise="rate",
        judges="exact",
    ),
    MetricSpec(
        name="format_adherence",
        description="share of answers that stop at end-of-turn within the length and are well-formed",
        higher_is_better=True,
        low=0.0,
        high=1.0,
        reads=("answers",),
        noise="rate",
    ),
    MetricSpec(
        name="determinism",
        description="share of prompts whose greedy answer is the same under another batching",
        higher_is_better=True,
        low=0.0,
        high=1.0,
        reads=("answers",),
        noise="rate",
    ),
    MetricSpec(
        name="repetition_rate",
        description="share of answers whose repeated n-gram fraction is degenerate (loops)",
        higher_is_better=False,
        low=0.0,
        high=1.0,
        reads=("answers",),
        noise="rate",
    ),
    MetricSpec(
        name="stop_rate",
        description="share of answers that end at end-of-turn within the answer length",
        higher_is_better=True,
        low=0.0,
        high=1.0,
        reads=("answers",),
        noise="rate",
    ),
    MetricSpec(
        name="reference_match",
        description="share of references the answer check scores right when written exactly (below 1: blind)",
        higher_is_better=True,
        low=0.0,
        high=1.0,
        reads=("references",),
        noise="none",
    ),
)
