"""How many tokens a greedy answer may take: sized from the held-out references, not guessed.

Exact match, format adherence, GRPO's completions and the served model's default all generate a
bounded number of tokens. A fixed default (it was 8) cut every answer longer than that — SmolLM2
writes an ISO date in 10 tokens, so exact match read 0 for the base model and for a model that
answered all 60 held-out rows right. Here the budget comes from the references themselves: the
longest answer as the model would write it, with the task's tokenizer and prompt format (the chat
template's end-of-turn included), plus a margin for tokens that merge differently when generated.
A task may set the length (``eval.max_new_tokens``); a set length shorter than some reference
answer could never score that row right, so it is refused with the row named.

``reference_match`` tests the instrument itself: each reference answer written exactly as a model would
write it (its tokens, cut at the length, decoded as a generation is) goes through the task's answer check.
A check that cannot score its own references right (a length too short, an answer rule that never
matches, a decoding that drops part of the answer) is blind, whatever any model does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import BaseModel, Field

from trainteam.core.errors import BadInput
from trainteam.curation.answers import AnswerSpec
from trainteam.curation.formats import PromptFormat, example, example_ids, prompt_format, row_kind

MAX_NEW_TOKENS = 4096  # per generated answer: beyond it a greedy eval is hours on a CPU
DEFAULT_NEW_TOKENS = 8  # no answer to size from (text rows): the length a bare battery uses


class GenerationBudget(BaseModel):
    """The generation length the run's answer checks use, and where it came from."""

    tokens: int = Field(gt=0, le=MAX_NEW_TOKENS, description="max_new_tokens of every answer check")
    longest_answer: int | None = Field(
        default=None, description="tokens the longest reference answer needs, its end-of-answer token included"
    )
    row: int | None = Field(default=None, description="that answer's row in the held-out set (0-based)")
    sized: bool = Field(description="true: sized from the references; false: the task's own value")

    def describe(self) -> str:
        if not self.sized:
            return f"{self.tokens} new tokens (the task's eval.max_new_tokens)"
        if self.longest_answer is None:
            return f"{self.tokens} new tokens (no reference answers to size from)"
        return (
            f"{self.tokens} new tokens (the longest held-out answer, row {(self.row or 0) + 1}, takes "
            f"{self.longest_answer} with its end; plus a margin)"
        )


def margin(tokens: int) -> int:
    """Room over the longest answer: a quarter of it, at least 4 tokens."""
    return max(4, math.ceil(tokens / 4))


def answer_tokens(tokenizer, rec: dict, fmt: PromptFormat) -> int:
    """Tokens the answer of a pair or chat row takes when the model writes it, ending with the token
    generation stops at (EOS, or the template's end of turn): the rendered answer's tail less what
    the template adds after that token."""
    prompt_ids, full = example_ids(tokenizer, rec, fmt)
    tail = len(full) - len(prompt_ids)
    if fmt != "chat":
        return tail  # answer + EOS
    prompt, _ = example(rec)
    empty = {"prompt": prompt, "completion": "", **({"system": rec["system"]} if rec.get("system") else {})}
    p_empty, f_empty = example_ids(tokenizer, empty, fmt)
    after_end = max(0, len(f_empty) - len(p_empty) - 1)  # e.g. ChatML's "<|im_end|>\n": the newline after the end
    return max(1, tail - after_end)


def size_generation(
    tokenizer,
    rows: Sequence[dict],
    *,
    set_value: int | None = None,
    field: str = "eval.max_new_tokens",
    where: str = "the held-out rows",
) -> GenerationBudget:
    """The generation length for ``rows`` (the held-out set): ``set_value`` when the task gives one and
    every reference fits in it (else ``BadInput`` naming ``field`` and the row), else the longest
    reference answer plus ``margin``. Rows without an answer (text) are not sized."""
    fmt = prompt_format(tokenizer)
    longest, row = 0, None
    for i, rec in enumerate(rows):
        if row_kind(rec) not in ("pair", "chat"):
            continue
        n = answer_tokens(tokenizer, rec, fmt)
        if n > longest:
            longest, row = n, i
    if set_value is not None:
        if row is not None and set_value < longest:
            raise BadInput(
                f"{field}: {set_value} is shorter than the answer of row {row + 1} of {where} "
                f"({longest} tokens with its end, with this model's tokenizer): no answer check could "
                f"score it right; leave {field} out to size it from the answers, or set at least {longest}"
            )
        return GenerationBudget(tokens=set_value, longest_answer=longest or None, row=row, sized=False)
    if row is None:
        return GenerationBudget(tokens=DEFAULT_NEW_TOKENS, sized=True)
    return GenerationBudget(
        tokens=min(MAX_NEW_TOKENS, longest + margin(longest)), longest_answer=longest, row=row, sized=True
    )


def reference_match(
    tokenizer, rows: Sequence[dict], answer: AnswerSpec, max_new_tokens: int
) -> tuple[float, list[str]]:
    """(the share of answer rows whose reference, written as the model would write it and cut at
    ``max_new_tokens``, the answer check scores right; up to 3 references it does not, as decoded)."""
    fmt = prompt_format(tokenizer)
    right, total = 0, 0
    misses: list[str] = []
    for rec in rows:
        if row_kind(rec) not in ("pair", "chat"):
            continue
        prompt, full = example_ids(tokenizer, rec, fmt)
        n = answer_tokens(tokenizer, rec, fmt)  # the answer's tokens and the token generation stops at
        written = list(full[len(prompt) : len(prompt) + n - 1])[:max_new_tokens]
        text = tokenizer.decode(written, skip_special_tokens=True).strip()
        ok = n <= max_new_tokens and answer.is_correct(text, example(rec)[1])
        right, total = right + ok, total + 1
        if not ok and len(misses) < 3:
            misses.append(text)
    return (right / total if total else 1.0), misses
