"""Answers that are not numbers: exact match, format adherence and DPO's rejected answers on a tiny
model that learned text answers (capitals), checked by the task's AnswerSpec."""

from __future__ import annotations

import types

import pytest
from model_fixtures import make_model, make_tokenizer, train_steps

from trainteam.contract.train_task import parse_task
from trainteam.curation.answers import AnswerSpec
from trainteam.trainers.evaluation.battery import BatterySpec, exact_match, run_battery
from trainteam.workflows.steps.train import _preference_pairs

CAPITALS = {
    "France": "Paris",
    "Italy": "Rome",
    "Spain": "Madrid",
    "Peru": "Lima",
    "Japan": "Tokyo",
    "Egypt": "Cairo",
    "Kenya": "Nairobi",
    "Chile": "Santiago",
    "Cuba": "Havana",
    "Iran": "Tehran",
    "Mali": "Bamako",
    "Nepal": "Kathmandu",
}
ROWS = [{"prompt": f"{country}:", "completion": city} for country, city in CAPITALS.items()]


@pytest.fixture(scope="module")
def capitals():
    """A tiny model trained until it answers every row (greedy), with its tokenizer."""
    tok = make_tokenizer([r["prompt"] + r["completion"] for r in ROWS] * 20)
    model = make_model(tok, hidden=64, seed=0)
    train_steps(model, tok, ROWS, steps=150, lr=1e-2, batch=12)
    return model, tok


def test_exact_match_follows_the_answer_rule(capitals):
    model, tok = capitals
    right = exact_match(model, tok, ROWS, max_new_tokens=12, answer=AnswerSpec())
    assert right.accuracy == 1.0, right.samples
    assert exact_match(model, tok, ROWS, max_new_tokens=12).accuracy == 0.0  # the numeric rule: no text is right
    shouted = [dict(r, completion=f"{r['completion'].upper()}.") for r in ROWS]  # "PARIS."
    assert exact_match(model, tok, shouted, max_new_tokens=12, answer=AnswerSpec()).accuracy == 1.0
    strict = AnswerSpec(ignore_case=False)
    assert exact_match(model, tok, shouted, max_new_tokens=12, answer=strict).accuracy == 0.0


def test_battery_format_adherence_on_text(capitals):
    model, tok = capitals
    spec = BatterySpec(metrics=["exact_match", "format_adherence"], max_new_tokens=12)
    text = run_battery(model, tok, ROWS, stage="sft", spec=spec, answer=AnswerSpec()).metrics
    assert text == {"exact_match": 1.0, "format_adherence": 1.0, "reference_match": 1.0}
    choice = AnswerSpec(kind="choice", labels=sorted(CAPITALS.values()))
    assert run_battery(model, tok, ROWS, stage="sft", spec=spec, answer=choice).metrics == text
    numeric = run_battery(model, tok, ROWS, stage="sft", spec=spec).metrics
    # the demo's numeric rule cannot score a capital, not even the reference itself: a blind check says so
    assert numeric == {"exact_match": 0.0, "format_adherence": 0.0, "reference_match": 0.0}
    # Two labels the model never says: its answers name neither, so none is well-formed.
    other = run_battery(
        model, tok, ROWS, stage="sft", spec=spec, answer=AnswerSpec(kind="choice", labels=["Oslo", "Bern"])
    ).metrics
    assert other["format_adherence"] == 0.0


def test_dpo_rejects_another_rows_answer_where_the_model_is_right(tmp_path, capitals):
    model, tok = capitals
    ckpt = tmp_path / "capitals"
    model.save_pretrained(ckpt, safe_serialization=True)
    tok.save_pretrained(ckpt)
    (tmp_path / "train.jsonl").write_text("{}\n")
    task = parse_task(
        {
            "name": "t",
            "model": {"path": str(ckpt)},
            "stages": ["sft", "dpo"],
            "data": {"path": "train.jsonl", "eval_path": "train.jsonl"},
            "budget": {"max_wall_minutes": 5},
            "eval": {"max_new_tokens": 12},
        },
        "task.yaml",
        tmp_path,
    )
    assert task.answer == AnswerSpec()
    pairs = _preference_pairs(types.SimpleNamespace(task=task), ckpt, tok, ROWS, 12)
    assert len(pairs) == len(ROWS)
    refs = {r["prompt"]: r["completion"] for r in ROWS}
    for p in pairs:
        assert p["chosen"] == refs[p["prompt"]]
        assert p["rejected"] in CAPITALS.values() and p["rejected"] != p["chosen"]
