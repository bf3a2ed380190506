"""AnswerSpec: what an answer is, when it is right or well-formed, and a wrong one for DPO, for every kind."""

from __future__ import annotations

import random
import textwrap

import pytest
from pydantic import ValidationError

from trainteam.contract.train_task import parse_task
from trainteam.core.errors import BadInput
from trainteam.curation.answers import NUMERIC, AnswerSpec, default_answer

TASK = {"name": "t", "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2}, "budget": {"max_wall_minutes": 5}}


def test_exact_normalises_case_surrounding_punctuation_and_whitespace():
    spec = AnswerSpec()
    assert spec.is_correct('  "Paris."  ', "paris")
    assert spec.is_correct("**New   York**", "new york")
    assert spec.is_correct("(Rome)!", "Rome")
    assert not spec.is_correct("Paris is big", "Paris")
    # Signs, currency and percent are part of the answer, never stripped as punctuation.
    assert not spec.is_correct("-5", "5")
    assert not spec.is_correct("$5", "5") and not spec.is_correct("5%", "5")
    assert spec.extract("   ") is None and not spec.well_formed("...")
    assert spec.well_formed("Paris")


@pytest.mark.parametrize(
    "switch, output, reference",
    [
        ("ignore_case", "PARIS", "paris"),
        ("strip_surrounding", "Paris.", "Paris"),
        ("collapse_whitespace", "New  York", "New York"),
    ],
)
def test_each_normalisation_turns_off(switch, output, reference):
    assert AnswerSpec().is_correct(output, reference)
    assert not AnswerSpec(**{switch: False}).is_correct(output, reference)


def test_regex_group_whole_match_and_full_match():
    hashes = AnswerSpec(kind="regex", pattern=r"####\s*(-?\d+)")
    assert hashes.extract("40 + 2 = 42 #### 42") == "42"
    assert hashes.is_correct("so #### 42", "work it out... #### 42")  # the reference goes through the pattern
    assert hashes.is_correct("#### 42", "42")  # a reference the pattern does not match is the answer itself
    assert not hashes.is_correct("#### 41", "42")
    assert not hashes.well_formed("42") and not hashes.is_correct("42", "42")
    word = AnswerSpec(kind="regex", pattern=r"[A-Z][a-z]+")
    assert word.extract("the answer: Paris, I think") == "Paris"
    whole = AnswerSpec(kind="regex", pattern=r"[a-z]+", full_match=True)
    assert whole.well_formed(" paris ") and not whole.well_formed("paris 2")


def test_numeric_default_is_the_demos_old_rule():
    """Stripped output, one integer, full match, compared as text: what the battery and rewards did."""
    assert NUMERIC.is_correct(" 46 ", "46") and NUMERIC.is_correct("072", "072")
    assert not NUMERIC.is_correct("72", "072") and not NUMERIC.is_correct("4 6", "46")
    assert not NUMERIC.well_formed("46 because 40+6") and not NUMERIC.well_formed("")
    assert NUMERIC.well_formed("-3")
    assert default_answer(demo=True) == NUMERIC and default_answer(demo=False) == AnswerSpec()


def test_choice_names_one_label():
    abcd = AnswerSpec(kind="choice", labels=["A", "B", "C", "D"])
    assert abcd.extract("The answer is (B).") == "B"
    assert abcd.extract("b") == "B"  # an output that is just a label, in any case
    assert abcd.extract("B is a good choice") == "B"  # the article "a" is no label A
    assert abcd.is_correct("I pick C", "C") and not abcd.is_correct("I pick C", "D")
    assert abcd.is_correct("C", "C) Paris")  # the reference names its label


def test_choice_ambiguous_or_unnamed_is_not_well_formed():
    sentiment = AnswerSpec(kind="choice", labels=["positive", "negative", "very positive"])
    assert sentiment.extract("Very positive!") == "very positive"  # the longer label, not both
    assert not sentiment.well_formed("positive or negative")
    assert not sentiment.is_correct("positive or negative", "positive")
    assert not sentiment.well_formed("neutral")
    assert not sentiment.well_formed("positively")  # a label is a word of its own
    assert sentiment.check_reference("neutral") is not None and sentiment.check_reference("negative") is None


@pytest.fixture
def verifiers(tmp_path, monkeypatch, request):
    """A user's module on the path, its name unique per test."""
    name = f"user_checks_{request.node.name.replace('[', '_').replace(']', '_').replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent("""
        def close(answer, reference):
            return abs(float(answer) - float(reference)) <= 0.01

        def partial(answer, reference):
            return 0.5 if answer.lower().startswith(reference.lower()[:3]) else 0.0

        def shout(answer, reference):
            raise ValueError("cannot read " + answer)

        def words(answer, reference):
            return "yes"

        NOT_A_FUNCTION = 3
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def test_verifier_by_import_path(verifiers):
    close = AnswerSpec(kind="verifier", function=f"{verifiers}:close")
    assert close.is_correct("3.141", "3.14159") and close.score("3.141", "3.14159") == 1.0
    assert not close.is_correct("3.2", "3.14159") and close.score("3.2", "3.14159") == 0.0
    partial = AnswerSpec(kind="verifier", function=f"{verifiers}:partial")
    assert partial.score("Parisian", "Paris") == 0.5 and not partial.is_correct("Parisian", "Paris")
    assert AnswerSpec(kind="verifier", function=f"{verifiers}:partial", min_score=0.5).is_correct("Parisian", "Paris")
    assert partial.score("", "Paris") == 0.0  # no answer: the verifier is not asked


def test_verifier_errors_name_the_field(verifiers):
    for function, why in [
        ("no_such_module_xyz:check", "does not import"),
        (f"{verifiers}:missing", "has no 'missing'"),
        (f"{verifiers}:NOT_A_FUNCTION", "not a function"),
        ("just_a_name", "package.module:function"),
    ]:
        with pytest.raises(BadInput, match=rf"task.yaml: answer.function: .*{why}"):
            parse_task(
                {**TASK, "data": {"demo": "addition"}, "answer": {"kind": "verifier", "function": function}},
                "task.yaml",
            )
    with pytest.raises(BadInput, match=r"answer.function: .*:shout raised ValueError: cannot read 42"):
        AnswerSpec(kind="verifier", function=f"{verifiers}:shout").score("42", "42")
    with pytest.raises(BadInput, match=r"answer.function: .*returned 'yes'"):
        AnswerSpec(kind="verifier", function=f"{verifiers}:words").is_correct("42", "42")


@pytest.mark.parametrize(
    "answer, field",
    [
        ({"kind": "regex"}, "answer.pattern: required for kind regex"),
        ({"kind": "regex", "pattern": "(["}, "answer.pattern: not a regular expression"),
        ({"labels": ["a", "b"]}, "answer.labels: only for kind choice"),
        ({"kind": "choice", "labels": ["yes"]}, "answer.labels: give at least two"),
        ({"kind": "choice", "labels": ["Yes", "yes "]}, "answer.labels: 'Yes' and 'yes ' are the same label"),
        ({"kind": "verifier"}, "answer.function: required for kind verifier"),
        ({"full_match": True}, "full_match: only for kind regex"),
        ({"kind": "exact", "ignore_case": "yes"}, "answer.ignore_case"),
        ({"kind": "exact", "normalize": True}, "answer.normalize: unknown field"),
        ({"kind": "fuzzy"}, "answer.kind"),
    ],
)
def test_a_bad_answer_rule_names_its_field(answer, field):
    with pytest.raises(BadInput, match=rf"task.yaml: .*{field}"):
        parse_task({**TASK, "data": {"demo": "addition"}, "answer": answer}, "task.yaml")


def test_task_default_follows_the_data(tmp_path):
    demo = parse_task({**TASK, "data": {"demo": "addition"}}, "task.yaml")
    assert demo.answer == NUMERIC
    for name in ("train.jsonl", "eval.jsonl"):
        (tmp_path / name).write_text('{"prompt": "Capital of France?", "completion": "Paris"}\n')
    own = parse_task(
        {
            **TASK,
            "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2},
            "data": {"path": "train.jsonl", "eval_path": "eval.jsonl"},
        },
        "task.yaml",
        tmp_path,
    )
    assert own.answer == AnswerSpec(kind="exact")
    # The rule a run stores is the rule it reads back (the engine re-validates the task).
    stored = parse_task({**TASK, "data": {"demo": "addition"}, "answer": demo.answer.model_dump(mode="json")}, "run")
    assert stored.answer == NUMERIC
    choice = AnswerSpec(kind="choice", labels=["yes", "no"], ignore_case=False)
    assert AnswerSpec.model_validate(choice.model_dump(mode="json")) == choice
    with pytest.raises(ValidationError):  # strict: no "yes" for a bool
        AnswerSpec.model_validate({"ignore_case": "yes"})


def test_wrong_answer_is_never_correct(verifiers):
    rng = random.Random(0)
    cities = ["Paris", "Rome", "Madrid", "Lisbon", "paris."]
    cases = [
        (NUMERIC, ["072", "46", "-9", "0", "199"], []),
        (NUMERIC, ["Paris"], ["Paris", "Rome"]),  # a text reference under the numeric rule: never itself
        (AnswerSpec(), ["Paris", "Rome", "42", "3.5"], cities),
        (AnswerSpec(), ["Paris"], ["Paris", "paris", " PARIS. "]),  # nothing else in the pool: the negation
        (AnswerSpec(kind="choice", labels=["A", "B", "C"]), ["A", "B", "C", "B) Rome"], []),
        (
            AnswerSpec(kind="regex", pattern=r"answer: (\w+)"),
            ["answer: Paris", "Rome"],
            ["answer: Rome", "answer: Paris"],
        ),
        (AnswerSpec(kind="verifier", function=f"{verifiers}:close"), ["3.14", "2"], ["3.14", "3.141", "2.0"]),
    ]
    for spec, refs, pool in cases:
        for ref in refs:
            for _ in range(5):
                wrong = spec.wrong_answer(ref, rng, pool)
                assert wrong.strip() != ref.strip() and not spec.is_correct(wrong, ref), (spec.kind, ref, wrong)


def test_wrong_answer_per_kind():
    rng = random.Random(0)
    assert NUMERIC.wrong_answer("072", rng) == "073" and NUMERIC.wrong_answer("-9", rng) == "-0"  # DPO's digit change
    assert AnswerSpec(kind="choice", labels=["yes", "no"]).wrong_answer("yes", rng) == "no"
    assert AnswerSpec().wrong_answer("Paris", rng, ["Paris", "Rome"]) == "Rome"  # another row's reference
    assert AnswerSpec().wrong_answer("Paris", rng, ["paris"]) == "not Paris"
