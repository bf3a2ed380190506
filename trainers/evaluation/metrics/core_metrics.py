"""The metrics the battery measures itself (loss, exact match, the reliability checks): their records.

How each is computed lives in ``trainers/evaluation/battery.py``; here is what each means to a gate.
"""

from __future__ import annotations

from trainteam.trainers.evaluation.metrics.metric_spec import MetricSpec, share

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
    share(
        "exact_match",
        "share of greedy answers the task's answer rule scores right (one right string a row)",
        reads=("answers", "references"),
        judges="exact",
    ),
    share("format_adherence", "share of answers that stop at end-of-turn within the length and are well-formed"),
    share("determinism", "share of prompts whose greedy answer is the same under another batching"),
    share("repetition_rate", "share of answers whose repeated n-gram fraction is degenerate (loops)", higher=False),
    share("stop_rate", "share of answers that end at end-of-turn within the answer length"),
    share(
        "reference_match",
        "share of references the answer check scores right when written exactly (below 1: blind)",
        reads=("references",),
        noise="none",
    ),
)
