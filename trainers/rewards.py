"""Verifiable rewards for GRPO: the answer is checked, not judged.

TRL calls ``f(prompts, completions, completion_ids, **columns)`` with completions
decoded *without* special tokens; our GRPO datasets carry the reference answer in
``answer``. Whether the model closed its answer with EOS is read from the ids, which
the data engine's composite ``curation.rewards.score_reward`` (used to score samples
for preference pairs) cannot see; its exact-match term is shared.
"""

from __future__ import annotations

import re


def exact_answer_reward():
    """1 for the exact (stripped) answer: the data engine's ``score_reward`` exact term."""
    from trainteam.curation.rewards import score_reward

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
    return [exact_answer_reward(), format_reward(tokenizer.eos_token_id)]
