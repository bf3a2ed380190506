"""Verifiable rewards: the answer is checked, not judged.

``score_reward`` is the composite (exact match, format, length) that scores samples
before building preference pairs and GRPO groups, and (via :func:`reward_func`) can
serve directly as a TRL GRPO reward function. ``default_rewards`` are the GRPO step's
rewards: TRL calls ``f(prompts, completions, completion_ids, **columns)`` with
completions decoded *without* special tokens, and our GRPO datasets carry the
reference answer in ``answer``; whether the model closed its answer with EOS is read
from the ids, which ``score_reward`` cannot see, while the exact-match term is shared.
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


def exact_answer_reward():
    """1 for the exact (stripped) answer: ``score_reward``'s exact term."""

    def exact_answer(completions, answer, **_):
        return [score_reward(c, str(a)).exact for c, a in zip(completions, answer)]

    return exact_answer


def format_reward(eos_token_id: int | None, pattern: str = r"-?\d+"):
    """0.2 when the completion is one well-formed answer closed by EOS, else 0."""
    rx = re.compile(pattern)

    def well_formed(completions, completion_ids=None, **_):
        ids = completion_ids or [[] for _ in completions]
        return [
            0.2 if (len(i) > 0 and i[-1] == eos_token_id and rx.fullmatch(c.strip())) else 0.0
            for c, i in zip(completions, ids)
        ]

    return well_formed


def default_rewards(tokenizer) -> list:
    """The GRPO rewards when a task names none: exact answer, and a well-formed answer closed by EOS."""
    return [exact_answer_reward(), format_reward(tokenizer.eos_token_id)]
