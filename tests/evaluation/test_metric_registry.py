"""The metric registry: each metric declared once, found by the gates, the task and the battery."""

from __future__ import annotations

import importlib
import sys

import pytest

from trainteam.contract.train_task import TrainTask
from trainteam.core.errors import BadInput
from trainteam.trainers.evaluation.gates import GateRule, evaluate_gate
from trainteam.trainers.evaluation.metrics import metric_registry as R


def test_every_metric_says_its_direction_range_and_noise():
    assert {"heldout_loss", "exact_match", "rouge_l", "chrf", "form_rate", "stop_rate"} <= set(R.METRICS)
    assert R.higher_is_better("rouge_l") and not R.higher_is_better("heldout_loss")
    assert not R.higher_is_better("repetition_rate") and R.higher_is_better("lm_eval/hellaswag/acc")
    assert not R.higher_is_better("lm_eval/wikitext/word_perplexity")  # the harness's own convention
    assert [m.name for m in R.answer_metrics()] == ["form_rate", "rouge_l", "chrf"]
    assert R.get_metric("rouge_l").band(0.3, 60, se=0.02) == pytest.approx(0.04)
    assert R.get_metric("exact_match").band(0.0, 60) == pytest.approx(2 / 60)


def test_a_gate_reads_the_direction_from_the_registry():
    # chrF is higher-is-better, though nothing in its name says so; the rule is judged that way
    decision = evaluate_gate(
        "sft", {"chrf": 0.30}, [GateRule(metric="chrf", max_regression=0.05)], previous={"chrf": 0.4}
    )
    assert not decision.passed and "chrf dropped 0.1" in decision.reasons[0]


@pytest.mark.parametrize("where", ["eval", "gate"])
def test_an_unknown_metric_is_one_line_naming_the_known_ones(where):
    raw = {
        "name": "t",
        "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2},
        "data": {"demo": "addition"},
        "budget": {"max_wall_minutes": 5},
    }
    raw.update(
        {"eval": {"metrics": ["bleu"]}} if where == "eval" else {"gates": {"pretrain": {"metric": "bleu", "min": 0.1}}}
    )
    with pytest.raises(Exception) as err:
        TrainTask.model_validate(raw)
    text = str(err.value)
    assert "'bleu'" in text and "rouge_l" in text and "exact_match" in text


def test_a_new_metric_is_one_file(tmp_path, monkeypatch):
    """A made-up metric in a file of its own is found, checked and scored: nothing else changes."""
    pkg = tmp_path / "more_metrics"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "length_ratio.py").write_text(
        "from trainteam.trainers.evaluation.metrics.metric_spec import MetricScores, MetricSpec\n"
        "def score(answers, rows):\n"
        "    return MetricScores(values=[min(len(a), len(r)) / max(len(a), len(r), 1)\n"
        "                                for a, r in zip(answers, rows.references)])\n"
        "METRICS = (MetricSpec(name='length_ratio', description='answer length against the reference',\n"
        "                      higher_is_better=True, low=0, high=1, reads=('answers', 'references'),\n"
        "                      noise='bootstrap', judges='free_form', score=score),)\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    found = R.load(importlib.import_module("more_metrics"))
    assert list(found) == ["length_ratio"]
    monkeypatch.setattr(R, "METRICS", {**R.METRICS, **found})
    R.check_metric("length_ratio", min=0.5)
    with pytest.raises(ValueError, match="lies in"):
        R.check_metric("length_ratio", min=2)
    from trainteam.trainers.evaluation.metrics.metric_spec import AnswerRows

    rows = AnswerRows(prompts=("p", "q"), references=("abcd", "ab"))
    assert R.get_metric("length_ratio").score(["ab", "ab"], rows).mean == pytest.approx(0.75)
    sys.modules.pop("more_metrics", None)


def test_a_metric_declared_twice_is_refused(tmp_path, monkeypatch):
    pkg = tmp_path / "twice_metrics"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    body = (
        "from trainteam.trainers.evaluation.metrics.metric_spec import MetricSpec\n"
        "METRICS = (MetricSpec(name='x', description='x', higher_is_better=True, low=0, reads=('answers',),"
        " noise='none'),)\n"
    )
    (pkg / "a.py").write_text(body)
    (pkg / "b.py").write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TypeError, match="declared twice"):
        R.load(importlib.import_module("twice_metrics"))
    sys.modules.pop("twice_metrics", None)


def test_get_metric_is_bad_input():
    with pytest.raises(BadInput, match="one of heldout_loss"):
        R.get_metric("bleu")
