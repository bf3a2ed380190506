"""Verifiable rewards: the answer is checked, not judged, by the task's ``AnswerSpec``.

``score_reward`` is the composite (correct answer, format, length) that scores samples
before building preference pairs and GRPO groups, and (via :func:`reward_func`) can
serve directly as a TRL GRPO reward function. ``default_rewards`` are the GRPO step's
rewards: TRL calls ``f(prompts, completions, completion_ids, **columns)`` with
completions decoded *without* special tokens (on chat prompts, as assistant turns:
``formats.completion_content`` gives the text), and our GRPO datasets carry the
reference answer in ``answer``; whether the model closed its answer with EOS is read
from the ids, which ``score_reward`` cannot see, while the correctness term is shared.
Each takes the ``AnswerSpec`` that says what a right and a well-formed answer are;
without one, the bundled demo's numbers (``answers.NUMERIC``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from trainteam.curation.answers import NUMERIC, AnswerSpec
from trainteam.curation.formats import completion_content


class RewardWeights(BaseModel):
    model_config = ConfigDict(extra="forbid")

    exact: float = 1.0
    format: float = 0.2
    length: float = 0.1
    target_chars: int | None = Field(
        None, ge=1, description="longer answers lose the length reward; default: the reference's length"
    )


class RewardBreakdown(BaseModel):
    exact: float
    format: float
    length: float
    total: float


def score_reward(
    completion: str, reference: str, weights: RewardWeights | None = None, answer: AnswerSpec = NUMERIC
) -> RewardBreakdown:
    """Exact = ``answer.score`` (1 for a correct answer; a verifier's own score); format = 1 for a
    well-formed answer (``answer.well_formed``); length = 1 up to the target, falling linearly to 0
    at twice the target (rambling is penalized)."""
    w = weights or RewardWeights()
    text = completion.strip()
    exact = answer.score(completion, str(reference))
    fmt = 1.0 if answer.well_formed(completion) else 0.0
    target = w.target_chars or max(1, len(str(reference).strip()))
    over = max(0, len(text) - target)
    length = max(0.0, 1.0 - over / target)
    total = w.exact * exact + w.format * fmt + w.length * length
    return RewardBreakdown(exact=exact, format=fmt, length=length, total=total)


def reward_func(weights: RewardWeights | None = None, answer_field: str = "answer", answer: AnswerSpec = NUMERIC):
    """A TRL reward function ``f(completions, <answer_field>, **kw) -> list[float]``."""

    def composite_reward(completions, **columns):
        refs = columns[answer_field]
        return [
            score_reward(completion_content(c), r, weights, answer).total
            for c, r in zip(completions, refs, strict=True)
        ]

    composite_reward.__name__ = "composite_reward"
    return composite_reward


def exact_answer_reward(spec: AnswerSpec = NUMERIC):
    """1 for a correct answer (a verifier's score): ``score_reward``'s exact term."""

    def exact_answer(completions, answer, **_):
        return [spec.score(completion_content(c), str(a)) for c, a in zip(completions, answer, strict=True)]

    return exact_answer


def format_reward(eos_token_id: int | None, spec: AnswerSpec = NUMERIC):
    """0.2 when the completion is one well-formed answer closed by EOS, else 0."""

    def well_formed(completions, completion_ids=None, **_):
        ids = completion_ids or [[] for _ in completions]
        return [
            0.2 if (len(i) > 0 and i[-1] == eos_token_id and spec.well_formed(completion_content(c))) else 0.0
            for c, i in zip(completions, ids, strict=True)
        ]

    return well_formed


def default_rewards(tokenizer, answer: AnswerSpec = NUMERIC) -> list:
    """The GRPO rewards when a task names none: a correct answer, and a well-formed answer closed by EOS."""
    return [exact_answer_reward(answer), format_reward(tokenizer.eos_token_id, answer)]
