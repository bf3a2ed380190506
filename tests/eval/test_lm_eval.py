"""A real lm-evaluation-harness run on a local checkpoint with a local task (offline)."""

from __future__ import annotations

import json

import pytest

from trainteam.errors import BadInput
from trainteam.trainers.eval_battery import BatterySpec, run_battery
from trainteam.trainers.lm_eval_runner import run_lm_eval, write_exact_match_task


def test_harness_exact_match_agrees_with_ours(tiny_checkpoint, addition_data, tmp_path):
    """The harness and trainers.evaluation.exact_match score the same checkpoint the same way."""
    from trainteam.trainers.evaluation import exact_match
    from trainteam.trainers.tokenizer import load_tokenizer

    held = addition_data[1]
    tok = load_tokenizer(tiny_checkpoint)
    task_yaml = write_exact_match_task(tmp_path / "tasks", "tiny_addition", held, tok)
    assert task_yaml.is_file()
    res = run_lm_eval(tiny_checkpoint, ["tiny_addition"], include_path=tmp_path / "tasks", out_dir=tmp_path / "out")
    ours = exact_match(tiny_checkpoint, tok, held)
    assert res.n_samples["tiny_addition"] == len(held)
    assert res.metric("tiny_addition", "exact_match") == pytest.approx(ours.accuracy)
    saved = json.loads((tmp_path / "out" / "lm_eval_results.json").read_text())
    assert saved["results"]["tiny_addition"]["exact_match,none"] == pytest.approx(ours.accuracy)


def test_battery_runs_harness_tasks(tiny_checkpoint, addition_data, tmp_path):
    spec = BatterySpec(metrics=["exact_match", "lm_eval"])
    res = run_battery(tiny_checkpoint, None, addition_data[1], stage="sft", spec=spec, out_dir=tmp_path)
    assert res.metrics["lm_eval/sft_exact_match/exact_match"] == pytest.approx(res.metrics["exact_match"])


def test_unknown_task_is_a_clear_error(tiny_checkpoint, tmp_path):
    (tmp_path / "tasks").mkdir()
    with pytest.raises(BadInput, match="not defined under"):
        run_lm_eval(tiny_checkpoint, ["nope"], include_path=tmp_path / "tasks")
    with pytest.raises(BadInput, match="no config.json"):
        run_lm_eval(tmp_path, ["nope"], include_path=tmp_path / "tasks")
