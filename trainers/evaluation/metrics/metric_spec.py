"""What a metric is: its record (``MetricSpec``), the rows an answer metric reads (``AnswerRows``) and the
noise band a difference must reach before it counts (pure; no torch).

A metric file of this folder declares ``METRICS: tuple[MetricSpec, ...]``; ``metric_registry`` collects them.
The gates, the recipe search, the judge, the report and the console ask the registry for a metric's
direction, range and noise instead of guessing from its name.

Noise, by the metric's ``noise``:

- ``rate`` (a share of rows right): two binomial standard errors of the rate, at least two rows' worth (2/n):
  60 rows at 1.7 % right → 0.05;
- ``loss``: 1 % of the value (at least 0.001);
- ``bootstrap`` (a mean of per-row scores, ROUGE-L, chrF): two standard errors of the mean, estimated by a
  seeded bootstrap over the rows (1,000 resamples) and recorded beside the metric as ``<name>_se``;
- ``none``: no band (a measurement of the instrument, or a reliability share judged at zero).
"""

from __future__ import annotations

import math
import random
import re
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from trainteam.curation.formats import Prompt

Reads = Literal["loss", "answers", "references", "prompts", "model"]
Noise = Literal["rate", "loss", "bootstrap", "none"]
Judges = Literal["any", "exact", "free_form"]

LOSS_BAND = 0.01  # a held-out loss change under 1 % of the input's is noise
BOOTSTRAP_RESAMPLES = 1000


def rate_band(rate: float, n: int | None) -> float:
    """Two binomial standard errors of ``rate`` on ``n`` rows, at least two rows' worth (2/n)."""
    if not n:
        return 0.05
    return max(2 * math.sqrt(max(rate * (1 - rate), 0.0) / n), 2 / n)


def loss_band(loss: float) -> float:
    return max(LOSS_BAND * abs(loss), 1e-3)


def bootstrap_se(values: Sequence[float], seed: int = 0, resamples: int = BOOTSTRAP_RESAMPLES) -> float:
    """The standard error of the mean of ``values``, by a seeded bootstrap over them (rows resampled with
    replacement); 0 for fewer than two values. Hand-written: ten lines, and numpy's generator would tie the
    figure to numpy's stream across versions."""
    n = len(values)
    if n < 2:
        return 0.0
    rng = random.Random(seed)
    means = [sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(resamples)]
    centre = sum(means) / resamples
    return math.sqrt(sum((m - centre) ** 2 for m in means) / (resamples - 1))


def prompt_words(prompt: Prompt) -> str:
    """The text a person wrote in a prompt: a plain prompt, or every non-assistant turn's content."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content") or "") for m in prompt if m.get("role") != "assistant")


class AnswerRows(BaseModel):
    """The held-out rows an answer metric reads: each prompt's text and its reference answer."""

    model_config = ConfigDict(frozen=True)

    prompts: tuple[str, ...]
    references: tuple[str, ...]

    @classmethod
    def of(cls, pairs: Sequence[tuple[Prompt, str]]) -> AnswerRows:
        return cls(prompts=tuple(prompt_words(p) for p, _ in pairs), references=tuple(r for _, r in pairs))

    def __len__(self) -> int:
        return len(self.references)


class MetricScores(BaseModel):
    """An answer metric on some rows: a score per row (the metric is their mean) and the misses worth showing."""

    values: list[float]
    misses: list[str] = Field(default_factory=list, description="a few rows it scored low, with why")
    rule: dict[str, object] | None = Field(default=None, description="what the metric learnt from the references")

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values) if self.values else 0.0


Scorer = Callable[[Sequence[str], AnswerRows], MetricScores]


class MetricSpec(BaseModel):
    """One metric: how it reads, which way is better, its range and its noise."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    description: str
    higher_is_better: bool
    low: float
    high: float | None = None
    reads: tuple[Reads, ...]
    noise: Noise
    judges: Judges = Field(
        default="any",
        description="the answers it can judge: exact (one right string), free_form (wording varies) or any",
    )
    score: Scorer | None = Field(
        default=None, description="per-row scores from generated answers; None: the battery measures it itself"
    )

    def band(self, value: float, n: int | None, se: float | None = None) -> float:
        """The smallest difference from ``value`` that is not noise (module docstring)."""
        if self.noise == "rate":
            return rate_band(value, n)
        if self.noise == "loss":
            return loss_band(value)
        if self.noise == "bootstrap":
            return 2 * se if se else (rate_band(0.5, n) if n else 0.05)
        return 0.0

    def better(self, a: float, b: float) -> bool:
        return a > b if self.higher_is_better else a < b


def share(name: str, description: str, *, higher: bool = True, **fields: object) -> MetricSpec:
    """A metric that is a share of rows, in [0, 1], with a rate's noise (two binomial standard errors)."""
    spec = {"reads": ("answers",), "noise": "rate", **fields}
    return MetricSpec(name=name, description=description, higher_is_better=higher, low=0.0, high=1.0, **spec)


def words(text: str) -> tuple[str, ...]:
    return tuple(re.findall(r"\w+(?:[-'.]\w+)*", text.lower()))
