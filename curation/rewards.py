"""A composite, verifiable reward: exact match, format, length.

Used to score samples before building preference pairs and GRPO groups, and (via
:func:`reward_func`) directly as a TRL GRPO reward function.
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field


class RewardWeights(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exact: float = 1.0
    format: float = 0.2
    length: float = 0.1
    pattern: str = Field(r"-?\d+", description="what a well-formed answer looks like (full match)")
    target_chars: int | None = Field(None, ge=1, description="longer answers lose the length reward; default: the reference's length")


class RewardBreakdown(BaseModel):
    exact: float
    format: float
    length: float
    total: float


def score_reward(completion: str, reference: str, weights: RewardWeights | None = None) -> RewardBreakdown:
    """Exact match of the stripped answer; format = full match of ``pattern``; length = 1
    up to the target, falling linearly to 0 at twice the target (rambling is penalized)."""
    w = weights or RewardWeights()
    answer = completion.strip()
    exact = 1.0 if answer == str(reference).strip() else 0.0
    fmt = 1.0 if re.fullmatch(w.pattern, answer) else 0.0
    target = w.target_chars or max(1, len(str(reference).strip()))
    over = max(0, len(answer) - target)
    length = max(0.0, 1.0 - over / target)
    total = w.exact * exact + w.format * fmt + w.length * length
    return RewardBreakdown(exact=exact, format=fmt, length=length, total=total)


def reward_func(weights: RewardWeights | None = None, answer_field: str = "answer"):
    """A TRL reward function ``f(completions, <answer_field>, **kw) -> list[float]``."""

    def composite_reward(completions, **columns):
        refs = columns[answer_field]
        return [score_reward(c if isinstance(c, str) else c[-1]["content"], r, weights).total for c, r in zip(completions, refs)]

    composite_reward.__name__ = "composite_reward"
    return composite_reward
