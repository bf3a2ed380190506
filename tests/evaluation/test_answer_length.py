"""The answer checks' generation length is sized from the held-out answers, with the model's tokenizer and
prompt format; a set length shorter than an answer is refused naming the field and the row.

The case that made it: SmolLM2 writes an ISO date in 10 tokens and the fixed default was 8, so every answer
was cut and exact match read 0 for a model that answered every row right."""

from __future__ import annotations

import pytest

from trainteam.core.errors import BadInput
from trainteam.trainers.evaluation.answer_length import DEFAULT_NEW_TOKENS, answer_tokens, margin, size_generation

DATES = [{"messages": [{"role": "user", "content": "Write the second of August, 1990 as an ISO date."},
                       {"role": "assistant", "content": "1990-08-02"}]},
         {"messages": [{"role": "user", "content": "Write the fourth of July, 1976 as an ISO date."},
                       {"role": "assistant", "content": "1976-07-04"}]},
         {"prompt": "Say yes.", "completion": "yes"}]


@pytest.fixture(scope="module")
def smol(real_model):
    from trainteam.trainers.training.tokenizer import load_tokenizer

    return load_tokenizer(real_model)


def test_the_length_holds_the_longest_answer_and_a_margin(smol):
    date = len(smol("1990-08-02", add_special_tokens=False)["input_ids"])
    assert date == 10  # what cut every answer at the old default of 8
    assert answer_tokens(smol, DATES[0], "chat") == date + 1  # the answer and <|im_end|>, not ChatML's newline after
    budget = size_generation(smol, DATES)
    assert budget.sized and budget.longest_answer == 11 and budget.row == 0
    assert budget.tokens == 11 + margin(11) == 15
    assert "row 1" in budget.describe() and "15 new tokens" in budget.describe()


def test_a_set_length_shorter_than_an_answer_is_refused_naming_the_field_and_the_row(smol):
    rows = [DATES[2], DATES[1]]
    with pytest.raises(BadInput) as refused:
        size_generation(smol, rows, set_value=8, field="eval.max_new_tokens", where="eval.jsonl")
    line = str(refused.value)
    assert line.startswith("eval.max_new_tokens: 8 is shorter than the answer of row 2 of eval.jsonl (11 tokens")
    assert "\n" not in line
    kept = size_generation(smol, rows, set_value=11)
    assert (kept.tokens, kept.sized) == (11, False)


@pytest.fixture(scope="module")
def tok():
    from model_fixtures import make_tokenizer

    return make_tokenizer([f"{a}+{b}={a + b:03d}" for a in range(30) for b in range(30)])


def test_a_plain_prompt_model_counts_the_answer_and_eos(tok):
    row = {"prompt": "12+34=", "completion": "046"}
    n = len(tok("046", add_special_tokens=False)["input_ids"]) + 1
    assert answer_tokens(tok, row, "plain") == n
    assert size_generation(tok, [row]).tokens == n + margin(n)


def test_rows_without_answers_keep_the_default(tok):
    assert size_generation(tok, [{"text": "just text"}]).tokens == DEFAULT_NEW_TOKENS
