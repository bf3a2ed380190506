"""A real lm-evaluation-harness run on a local checkpoint with a local task (offline)."""

from __future__ import annotations

import json

import pytest

from trainteam.core.errors import BadInput
from trainteam.trainers.evaluation.battery import BatterySpec, run_battery
from trainteam.trainers.evaluation.lm_eval_runner import run_lm_eval, write_exact_match_task


def test_harness_exact_match_agrees_with_ours(tiny_checkpoint, addition_data, tmp_path):
    """The harness and trainers.eval_battery.exact_match score the same checkpoint the same way."""
    from trainteam.trainers.evaluation.battery import exact_match
    from trainteam.trainers.training.tokenizer import load_tokenizer

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


def test_hand_written_multiple_choice_task(tiny_checkpoint, addition_data, tmp_path):
    """Any local harness YAML works: a loglikelihood multiple-choice task, checked against
    the choice the model itself scores higher."""
    import torch
    import yaml
    from transformers import AutoModelForCausalLM

    from trainteam.curation.formats import prompt_text
    from trainteam.trainers.training.tokenizer import load_tokenizer

    tok = load_tokenizer(tiny_checkpoint)
    held = addition_data[1][:12]
    docs = [
        {
            "context": prompt_text(tok, r["prompt"]),
            "choices": [r["completion"], str(int(r["completion"]) + 3)],
            "label": 0,
        }
        for r in held
    ]
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "mc.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    (tasks / "mc.yaml").write_text(
        yaml.safe_dump(
            {
                "task": "mc_addition",
                "dataset_path": "json",
                "dataset_kwargs": {"data_files": {"test": str(tasks / "mc.jsonl")}},
                "test_split": "test",
                "output_type": "multiple_choice",
                "doc_to_text": "{{context}}",
                "doc_to_choice": "{{choices}}",
                "doc_to_target": "{{label}}",
                "target_delimiter": "",
                "metric_list": [{"metric": "acc"}],
            }
        )
    )
    res = run_lm_eval(tiny_checkpoint, ["mc_addition"], include_path=tasks)

    model = AutoModelForCausalLM.from_pretrained(tiny_checkpoint).eval()

    def logprob(context: str, cont: str) -> float:
        c = tok(context, add_special_tokens=False)["input_ids"]
        x = tok(cont, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logp = model(input_ids=torch.tensor([c + x])).logits[0, :-1].log_softmax(-1)
        return sum(logp[len(c) - 1 + i, t].item() for i, t in enumerate(x))

    ours = sum(logprob(d["context"], d["choices"][0]) > logprob(d["context"], d["choices"][1]) for d in docs) / len(
        docs
    )
    assert res.metric("mc_addition", "acc") == pytest.approx(ours)
