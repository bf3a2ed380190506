"""The free-form tasks of the peer benchmark (tests/freeform_tasks.py): seeded, held-out prompts new, references
that hold their required strings, vary in wording and stay short."""

from __future__ import annotations

import re
from collections import defaultdict

import pytest
from freeform_tasks import FREEFORM_TASKS, ISSUES, PLACES, SIGN_OFF, SUMMARY_ASKS, freeform_rows

# a word of each summary note's kind, as the note's fact sentences say it
NOTE_KINDS = {
    "planning meeting": "meeting",
    "water leak": "incident",
    "office chairs": "delivery",
    "fire extinguishers": "inspection",
    "first-aid": "course",
    "charity run": "fundraiser",
}


def prompt(row: dict) -> str:
    return row["messages"][0]["content"]


def answer(row: dict) -> str:
    return row["messages"][-1]["content"]


def masked(text: str, facts: list[str]) -> str:
    """``text`` with the row's facts and every place name replaced by placeholders: the wording alone."""
    for i, fact in enumerate(sorted(facts, key=len, reverse=True)):
        text = text.replace(fact, f"<{i}>")
    return re.sub(r"\b(" + "|".join(PLACES) + r")\b", "<place>", text)


def held_with_required(task: str) -> list[tuple[dict, list[str]]]:
    _, held, required = freeform_rows(task)
    return list(zip(held, required, strict=True))


def test_the_tasks_are_the_two_named():
    assert FREEFORM_TASKS == ("reply", "summary")


@pytest.mark.parametrize("task", FREEFORM_TASKS)
def test_rows_are_deterministic_per_seed(task):
    first = freeform_rows(task, 40, 20, seed=3)
    assert first == freeform_rows(task, 40, 20, seed=3)
    other = freeform_rows(task, 40, 20, seed=4)
    assert [prompt(r) for r in other[0]] != [prompt(r) for r in first[0]]
    train, held, required = first
    assert (len(train), len(held), len(required)) == (40, 20, 20)
    for row in train + held:
        assert [m["role"] for m in row["messages"]] == ["user", "assistant"]
        assert set(row) == {"messages"}


@pytest.mark.parametrize("task", FREEFORM_TASKS)
def test_held_out_prompts_and_answers_are_new(task):
    train, held, _ = freeform_rows(task)
    assert (len(train), len(held)) == (200, 60)
    seen = {prompt(r) for r in train} | {answer(r) for r in train}
    assert not any(prompt(r) in seen or answer(r) in seen for r in held)
    assert len({prompt(r) for r in held}) == len(held)


@pytest.mark.parametrize("task", FREEFORM_TASKS)
def test_every_held_out_reference_holds_its_required_strings(task):
    for row, required in held_with_required(task):
        assert required and all(s in answer(row) for s in required), (answer(row), required)
        # the facts come from the prompt; the house phrases are the task's own
        facts = [s for s in required if s != SIGN_OFF]
        if task == "reply":
            assert required[0].startswith("Hi ") and required[0].endswith(",") and SIGN_OFF in required
            facts = [required[0][3:-1], *facts[1:]]
        assert all(f in prompt(row) for f in facts), (prompt(row), facts)


def test_reply_has_the_house_form_and_a_reply_missing_a_fact_fails_it():
    for row, (greeting, order, fact, sign_off) in held_with_required("reply"):
        text = answer(row)
        assert text.startswith(greeting + "\n") and text.endswith("\n" + sign_off) and sign_off == SIGN_OFF
        assert re.fullmatch(r"ORD-\d{5}", order)
        assert re.fullmatch(r"\d{1,2} [A-Z][a-z]+ 20\d\d|\$\d+\.\d\d", fact)
        without = text.replace(order, "your order")
        assert not all(s in without for s in (greeting, order, fact, sign_off))


def test_reply_references_vary_in_wording_within_each_issue():
    train, held, _ = freeform_rows("reply")
    shapes: dict[str, set[str]] = defaultdict(set)
    texts: dict[str, list[str]] = defaultdict(list)
    for row in train + held:
        issue = next(k for k, (_, said, _) in ISSUES.items() if said.split("{fact}")[0] in prompt(row))
        name = re.search(r"^Hi (\w+),", answer(row)).group(1)
        order = re.search(r"ORD-\d{5}", prompt(row)).group(0)
        fact = re.search(r"\d{1,2} [A-Z][a-z]+ 20\d\d|\$\d+\.\d\d", prompt(row)).group(0)
        shapes[issue].add(masked(answer(row), [name, order, fact]))
        texts[issue].append(answer(row))
    assert set(shapes) == set(ISSUES)
    assert all(len(s) >= 4 for s in shapes.values()), {k: len(s) for k, s in shapes.items()}
    assert len(set().union(*shapes.values())) >= 40
    assert all(len(set(t)) == len(t) for t in texts.values())  # no two rows of an issue share a reference


def test_summary_references_vary_in_wording_within_each_kind():
    train, held, required = freeform_rows("summary", 200, 200)
    shapes: dict[str, set[str]] = defaultdict(set)
    for row, facts in zip(held, required, strict=True):
        kind = next(k for word, k in NOTE_KINDS.items() if word in prompt(row))
        shapes[kind].add(masked(answer(row), facts))
    assert set(shapes) == set(NOTE_KINDS.values())
    assert all(len(s) >= 4 for s in shapes.values()), {k: len(s) for k, s in shapes.items()}


def test_summary_notes_have_three_to_five_sentences_and_the_summary_one_or_two():
    for row, (name, number, date) in held_with_required("summary"):
        prefix = next(p for p in (a.split("{note}")[0] for a in SUMMARY_ASKS) if prompt(row).startswith(p))
        sentences = re.findall(r"[^.]+\.(?:\s|$)", prompt(row)[len(prefix) :].strip())
        assert 3 <= len(sentences) <= 5, prompt(row)
        assert 1 <= len(re.findall(r"\.(?:\s|$)", answer(row))) <= 2, answer(row)
        assert re.fullmatch(r"[A-Z][a-z]+ [A-Z][a-z]+", name) and number.isdigit() and number not in date


@pytest.mark.parametrize("task", FREEFORM_TASKS)
def test_answers_are_short_free_text(task):
    """About 25-60 SmolLM2 tokens (measured: reply 43-60, summary 27-42), that is 15-40 words."""
    train, held, _ = freeform_rows(task)
    words = [len(answer(r).split()) for r in train + held]
    assert 15 <= min(words) and max(words) <= 40, (min(words), max(words))
