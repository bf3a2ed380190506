"""Free-form answers judged by metrics that fit them (issue 37): the field's scorers, the form check learnt
from the references, the answers' style, and the default gate on real-shaped answers of the two free-form
tasks (tests/freeform_tasks.py) — refusing the input model and a model that learnt only the form, passing a
trained one, whatever exact match reads."""

from __future__ import annotations

import random

import pytest
from chat_tasks import chat_rows
from freeform_tasks import freeform_rows
from rouge_score import rouge_scorer
from sacrebleu.metrics import CHRF

from trainteam.curation.answers import AnswerSpec
from trainteam.curation.formats import example
from trainteam.trainers.evaluation.answer_style import answer_style
from trainteam.trainers.evaluation.metrics.form_check import facts_of, form_rate, learn
from trainteam.trainers.evaluation.metrics.metric_registry import METRICS
from trainteam.trainers.evaluation.metrics.metric_spec import AnswerRows, bootstrap_se
from trainteam.trainers.evaluation.stage_gate import StageInput, judge_stage


def _rows(task: str) -> tuple[list[dict], AnswerRows, list[list[str]]]:
    _, held, required = freeform_rows(task, 40, 60, seed=3)
    return held, AnswerRows.of([example(r) for r in held]), required


def test_rouge_and_chrf_are_the_libraries_own_figures():
    held, rows, _ = _rows("reply")
    answers = [r.split("\n")[0] + " Thanks, we will look into it." for r in rows.references]
    scorer = rouge_scorer.RougeScorer(["rougeL"])
    want = [scorer.score(ref, a)["rougeL"].fmeasure for a, ref in zip(answers, rows.references, strict=True)]
    assert METRICS["rouge_l"].score(answers, rows).values == pytest.approx(want)
    chrf = [CHRF().sentence_score(a, [ref]).score / 100 for a, ref in zip(answers, rows.references, strict=True)]
    assert METRICS["chrf"].score(answers, rows).values == pytest.approx(chrf)
    assert METRICS["rouge_l"].score(list(rows.references), rows).mean == pytest.approx(1.0)


def test_the_form_check_learns_facts_and_house_phrases_from_the_references():
    held, rows, required = _rows("reply")
    rule = learn(rows)
    assert rule.phrases == ["best regards the northwind support team"]  # every reference signs off the same way
    for facts, need in zip(rule.facts, required, strict=True):
        ids = [n for n in need if n.startswith("ORD-")]
        assert ids and set(ids) <= set(facts)  # the order id the prompt gives, repeated by the reference
    assert facts_of("Order 123 for Maria Lopez.", "Hi Maria, order 123 is here.") == ["123", "Maria"]
    assert facts_of("Maria wrote.", "Maria, thanks") == []  # a word that opens a sentence is not taken as a name
    shuffled = list(rows.references[1:]) + [rows.references[0]]  # right phrases, wrong facts
    scored = form_rate(shuffled, rows)
    assert scored.mean == 0.0 and "missing" in scored.misses[0] and "ORD-" in scored.misses[0]
    assert form_rate(list(rows.references), rows).mean == 1.0


def test_the_answers_style_is_read_off_the_references():
    for task in ("reply", "summary"):
        _, held, _ = freeform_rows(task, 10, 60, seed=0)
        style = answer_style(held, AnswerSpec())
        assert style.free_form and "long answers" in style.reasons[0]
        assert style.judged_by == ["heldout_loss", "rouge_l", "chrf", "form_rate"] and "exact_match" in style.reported
    for task in ("dates", "phone", "reverse"):
        _, held = chat_rows(task, 10, 60, seed=0)
        style = answer_style(held, AnswerSpec())
        assert style.kind == "exact" and style.judged_by == ["exact_match", "format_adherence"]
    same_prompt = [{"prompt": "Say hi.", "completion": c} for c in ("Hello!", "Hi there.", "Hey.")]
    assert "disagree" in answer_style(same_prompt, AnswerSpec()).line()
    named = answer_style(same_prompt, AnswerSpec(), ["chrf"])
    assert named.judged_by == ["chrf"] and named.named
    assert answer_style([{"text": "a b c"}], AnswerSpec()).kind == "text"
    assert answer_style(same_prompt, AnswerSpec(kind="regex", pattern="H\\w+")).kind == "exact"


def _base_like(rows: AnswerRows) -> list[str]:
    """What the untrained instruct model writes: a polite refusal or a restatement, no house form."""
    rng = random.Random(0)
    starts = ["I'm sorry, but as an AI I cannot access order details.", "Thank you for your message."]
    return [f"{rng.choice(starts)} You asked: {p[:60]}" for p in rows.prompts]


def _trained_like(task: str, references: tuple[str, ...]) -> list[str]:
    """A model that learnt the task: the reference's facts (its names, ids, numbers, dates) and the house
    greeting and sign-off, in words of its own (never the reference's sentence)."""
    out = []
    for ref in references:
        lines = ref.split("\n")
        facts = [w.strip(".,;:()") for w in ref.split() if w[:1].isupper() or any(c.isdigit() for c in w)]
        body = "We looked into this for you: " + ", ".join(dict.fromkeys(facts)) + "."
        out.append(f"{lines[0]}\n{body}\n{lines[-1]}" if task == "reply" else f"In short - {body}")
    return out


def _metrics(answers: list[str], rows: AnswerRows, loss: float, references: tuple[str, ...]) -> dict[str, float]:
    out = {"heldout_loss": loss, "exact_match": sum(a == r for a, r in zip(answers, references, strict=True)) / 60}
    for name in ("rouge_l", "chrf", "form_rate"):
        scored = METRICS[name].score(answers, rows)
        out[name] = scored.mean
        if METRICS[name].noise == "bootstrap":
            out[f"{name}_se"] = bootstrap_se(scored.values)
    return out


@pytest.mark.parametrize("task", ["reply", "summary"])
def test_the_default_free_form_gate_refuses_the_input_and_the_form_alone_and_passes_a_trained_model(task):
    held, rows, required = _rows(task)
    style = answer_style(held, AnswerSpec())
    refs = rows.references
    base = StageInput(name="base", metrics=_metrics(_base_like(rows), rows, 2.4, refs))
    form_only = list(refs[7:]) + list(refs[:7])  # another row's reply: the house form, someone else's facts
    # a few answers copied word for word: exact match reads more than for the trained model, and decides nothing
    copied = [refs[i] if i % 10 == 0 else a for i, a in enumerate(form_only)]
    models = {
        "input": _metrics(_base_like(rows), rows, 2.4, refs),
        "form only": _metrics(copied, rows, 1.1, refs),
        "trained": _metrics(_trained_like(task, refs), rows, 0.9, refs),
    }
    assert models["trained"]["exact_match"] == 0.0 < models["form only"]["exact_match"]
    verdicts = {name: judge_stage("sft", "post_train", "sft", m, [], base, 60, style=style) for name, m in
                models.items()}
    assert not verdicts["input"].passed
    assert not verdicts["form only"].passed
    assert any("form_rate" in r and "<" in r for r in verdicts["form only"].reasons)
    assert verdicts["trained"].passed, verdicts["trained"].reasons
    for decision in verdicts.values():
        checked = {c.metric for c in decision.checks}
        assert {"heldout_loss", "rouge_l", "form_rate"} <= checked and "exact_match" not in checked
        assert all(r.startswith("default gate") for r in decision.reasons)


def test_the_final_gate_allows_merging_noise_on_free_form_scores_only():
    from trainteam.workflows.steps.judge import final_tolerance

    judged = {"rouge_l": 0.7, "rouge_l_se": 0.02, "form_rate": 0.95, "exact_match": 1.0, "heldout_loss": 0.5}
    assert final_tolerance(0.0, "rouge_l", judged, 40) == pytest.approx(0.04)  # two bootstrap errors
    assert final_tolerance(0.0, "form_rate", judged, 40) == pytest.approx(0.069, abs=1e-3)  # two binomial errors
    assert final_tolerance(0.0, "heldout_loss", judged, 40) == pytest.approx(0.005)  # 1 % of the loss
    assert final_tolerance(0.0, "exact_match", judged, 40) == 0.0  # a short exact answer: the task's tolerance
    assert final_tolerance(0.1, "rouge_l", judged, 40) == 0.1
