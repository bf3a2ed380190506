"""A stage's gate never passes on nothing: a default gate when the task names none, and a measurement
failure when a checked answer metric reads the same for the input and the trained model while the
held-out loss fell (the case of a user's ISO dates cut at 8 tokens: exact match 0 -> 0, registered)."""

from __future__ import annotations

import math

import pytest

from trainteam.trainers.evaluation.diagnosis import GateEvidence, blind, check_diagnosis
from trainteam.trainers.evaluation.gates import GateRule
from trainteam.trainers.evaluation.stage_gate import StageInput, judge_stage, random_init, rate_band

BASE = StageInput(name="base", metrics={"exact_match": 1 / 60, "format_adherence": 0.0, "heldout_loss": 2.3})
LEARNT = {"exact_match": 1.0, "format_adherence": 1.0, "heldout_loss": 0.2}
CUT = {"exact_match": 0.0, "format_adherence": 0.0, "heldout_loss": 0.2}  # every answer cut: blind, loss fell


def test_noise_is_two_standard_errors_and_at_least_two_rows():
    assert rate_band(1 / 60, 60) == pytest.approx(2 / 60)  # 2 * sqrt(q(1-q)/n) = 0.033 as well
    assert rate_band(0.5, 100) == pytest.approx(0.1)
    assert rate_band(0.0, 60) == pytest.approx(2 / 60)


def test_a_stage_without_rules_must_beat_what_it_started_from():
    passed = judge_stage("sft", "post_train", "sft", LEARNT, [], BASE, 60)
    assert passed.passed and all(r.startswith("default gate (the task names none)") for r in passed.reasons)
    assert "exact_match 1 >= min" in passed.reasons[0] and "base 0.0167 + noise" in passed.reasons[0]
    same = judge_stage("sft", "post_train", "sft", {**BASE.metrics, "heldout_loss": 2.29}, [], BASE, 60)
    assert not same.passed and "exact_match 0.01667 < min 0.05" in same.reasons[0]
    assert not any("no gate rules" in r for r in passed.reasons + same.reasons)


def test_an_align_stage_must_not_fall_and_an_input_at_the_top_must_hold():
    top = StageInput(name="sft", metrics={"exact_match": 1.0, "heldout_loss": 0.1})
    assert judge_stage("grpo", "post_train", "grpo", {"exact_match": 1.0, "heldout_loss": 0.1}, [], top, 200).passed
    fell = judge_stage("grpo", "post_train", "grpo", {"exact_match": 0.9, "heldout_loss": 0.1}, [], top, 200)
    assert not fell.passed and "exact_match dropped 0.1" in fell.reasons[0]
    assert judge_stage("sft", "post_train", "sft", {"exact_match": 1.0, "heldout_loss": 0.09}, [], top, 200).passed


def test_a_pretraining_stage_is_held_to_the_loss_of_a_random_init():
    start = random_init(300)
    assert start.metrics["heldout_loss"] == pytest.approx(math.log(300)) and not start.measured
    learnt = judge_stage("pretrain", "pretrain", "pretrain", {"heldout_loss": 3.1, "exact_match": 0.0}, [], start, 64)
    assert learnt.passed and "random init 5.704" in learnt.reasons[0]
    idle = judge_stage("pretrain", "pretrain", "pretrain", {"heldout_loss": 5.69, "exact_match": 0.0}, [], start, 64)
    assert not idle.passed


def test_a_check_that_cannot_score_its_own_references_is_a_measurement_failure():
    # the user's case: every ISO date cut at 8 tokens, so not even the references themselves score right
    cut = {**CUT, "reference_match": 0.0}
    base = BASE.model_copy(update={"metrics": {**BASE.metrics, "exact_match": 0.0, "reference_match": 0.0}})
    default = judge_stage("sft", "post_train", "sft", cut, [], base, 60)
    assert not default.passed and [c.kind for c in default.checks][-2:] == ["measurement", "measurement"]
    assert default.reasons[-2].startswith("measurement failure: the answer check scores only 0% of the held-out "
                                          "references right when a model writes them exactly: exact_match")
    # with the user's own "no regression" rule, which passed on 0 -> 0 before
    own = judge_stage("sft", "post_train", "sft", cut, [GateRule(metric="exact_match", max_regression=0.0)], base, 60)
    assert not own.passed and [c.kind for c in own.checks] == ["regression", "measurement"]
    # a loss gate checks no answer: the instrument's blindness does not stop it
    assert judge_stage("sft", "post_train", "sft", cut, [GateRule(metric="heldout_loss", max=50.0)], base, 60).passed


def test_an_answer_metric_unchanged_while_the_loss_fell_never_passes():
    seen = {**CUT, "reference_match": 1.0}  # the check sees right answers: the model gives none yet
    own = judge_stage("sft", "post_train", "sft", seen, [GateRule(metric="exact_match", max_regression=0.0)],
                      StageInput(name="base", metrics={"exact_match": 0.0, "heldout_loss": 2.3}), 60)
    assert not own.passed and own.reasons[0] == "exact_match did not regress against base (0 -> 0)"
    assert own.reasons[1].startswith("exact_match reads 0 for base and for the trained model while held-out loss "
                                     "fell 2.3 -> 0.2: no evidence the model answers better")
    assert [c.kind for c in own.checks] == ["regression", "unchanged"]


def test_the_same_score_is_not_a_failure_at_the_top_nor_when_the_loss_did_not_fall():
    top = StageInput(name="sft", metrics={"exact_match": 1.0, "heldout_loss": 0.1})
    assert judge_stage("grpo", "post_train", "grpo", {"exact_match": 1.0, "heldout_loss": 0.05}, [], top, 200).passed
    flat = StageInput(name="base", metrics={"exact_match": 0.0, "heldout_loss": 2.3})
    rule = [GateRule(metric="exact_match", max_regression=0.0)]
    assert judge_stage("sft", "post_train", "sft", {"exact_match": 0.0, "heldout_loss": 2.299}, rule, flat, 60).passed
    loss_rule = [GateRule(metric="heldout_loss", max=50.0)]  # a metric that always sees: never "blind"
    assert judge_stage("sft", "post_train", "sft", CUT, loss_rule, flat, 60).passed


def test_the_judge_names_a_blind_metric_and_plans_no_retrain():
    ev = GateEvidence(stage="sft", losses=[(1, 2.0), (2, 1.0)], heldout_loss=0.2, max_steps=2, steps=2)
    d = blind(ev, "measurement failure: exact_match reads 0 ...")
    assert d.kind == "measurement" and d.plan.action == "stop" and not d.plan.retrains
    assert "eval.max_new_tokens" in d.plan.reason
    retrain = d.model_copy(update={"plan": d.plan.model_copy(update={"action": "more_steps"})})
    assert "not fixed by retraining" in check_diagnosis(retrain, ev)
