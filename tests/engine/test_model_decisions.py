"""A real model takes the training engineer's decisions (issue 14, item 5), end to end.

Each test is a real tiny run through ``trainteam execute-workflow`` in a subprocess, with the
training engineer on a scripted OpenAI-compatible server on 127.0.0.1 (tests/scripted_openai.py):
that server plays the persona's step conversations (train_tokenizer, train, align, merge_adapters)
and answers its decisions. A different choice by the model changes what the run does (the align
stage trains where the offline policy skips it; the stage trains at another probe's learning rate);
an answer that is malformed, of the wrong shape or refused by the rules leaves the run on the
offline policy's decision, with the warning recorded, and the API key never leaves the request's
Authorization header.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from local_http import serving
from scripted_openai import ScriptedOpenAI, evidence_of
from spine_helpers import TINY_TASK, cli

from trainteam.trainers.search.recipe_search import RecipeChoice
from trainteam.workflows.engine.store import RunStore
from trainteam.workflows.steps.headroom import AlignChoice
from trainteam.workspace import Workspace

API_KEY = "sk-model-decisions-scripted-0123456789abcdef"
MODEL = "openai:scripted-engineer"
ENGINEER_STEPS = ["train_tokenizer", "train", "align", "merge_adapters"]

# pretrain leaves exact match ~0 after 6 steps: headroom 1.0 <= align_min_headroom 1.0, so the offline policy skips
ALIGN_TASK = {
    **TINY_TASK,
    "name": "align-choice",
    "stages": ["pretrain", "grpo"],
    "align_min_headroom": 1.0,
    "training": {
        **TINY_TASK["training"],
        "grpo": {
            "max_steps": 2,
            "per_device_batch_size": 4,
            "seq_len": 32,
            "learning_rate": 1e-3,
            "grpo": {"num_generations": 4, "max_completion_length": 4},
        },
    },
}
# the length and batch given, the learning rate searched among 3 probes (9 steps each at most)
RECIPE_TASK = {
    **TINY_TASK,
    "name": "recipe-choice",
    "search": {"enabled": True, "trials": 3},
    "training": {"pretrain": {"max_steps": 24, "per_device_batch_size": 8, "seq_len": 32}},
}


@pytest.fixture
def engineer():
    """The training engineer's settings pointing at the scripted server (answers set by each test)."""
    ScriptedOpenAI.reset({})
    with serving(ScriptedOpenAI) as url:
        yield {
            "TRAINTEAM_MODEL_TRAINING_ENGINEER": MODEL,
            "TRAINTEAM_MODEL_BASE_URL_TRAINING_ENGINEER": url,
            "TRAINTEAM_MODEL_API_KEY_TRAINING_ENGINEER": API_KEY,
        }
    assert ScriptedOpenAI.errors == []  # every request was one the script knows how to answer


def _run(tmp_path: Path, task: dict, env: dict[str, str]) -> tuple[Workspace, dict, str]:
    (tmp_path / "task.yaml").write_text(yaml.safe_dump(task))
    proc = cli(
        tmp_path / "ws",
        "execute-workflow",
        "train_model",
        "--task",
        str(tmp_path / "task.yaml"),
        "--yes",
        "--json",
        timeout=600,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    view = json.loads(proc.stdout)
    assert view["status"] == "completed"
    return Workspace.open(tmp_path / "ws"), view, proc.stderr


def _output(ws: Workspace, view: dict, step: str) -> dict:
    return next(a["output"] for a in RunStore(ws.engine).attempts(view["run_id"]) if a["step"] == step)


def _decision(ws: Workspace, suffix: str) -> dict:
    (node,) = [n for n in ws.graph.nodes(kind="Decision") if n["id"].endswith(suffix)]
    return node


def _trained_lr(train: dict) -> float:
    """The learning rate the stage's trainer ran with: transformers' own record next to the weights."""
    import torch

    args = torch.load(Path(train["artifacts"]["checkpoint"]) / "training_args.bin", weights_only=False)
    return args.learning_rate


def _steps_on_the_model() -> list[str]:
    """The step conversations the scripted server played (the step prompt names the step's tool)."""
    users = [next(m["content"] for m in b["messages"] if m["role"] == "user") for b in ScriptedOpenAI.requests]
    return sorted({u.split("do this step with `", 1)[1].split("`", 1)[0] for u in users if "do this step" in u})


# ------------------------------------------------------------------------------------------ align
def test_offline_the_align_stage_without_headroom_is_skipped(tmp_path):
    ws, view, _ = _run(tmp_path, ALIGN_TASK, {"TRAINTEAM_MODEL_TRAINING_ENGINEER": "offline"})
    align = _output(ws, view, "align")
    assert align["outcome"] == "skipped" and align["summary"].startswith("grpo skipped: ")
    node = _decision(ws, "/align#1/align_choice")
    assert (node["decision"], node["decided_by"], node["stage"]) == ("skip", "offline", "grpo")
    assert "align_min_headroom" in node["reason"] and "warning" not in node
    assert "evaluate_align" not in {s["name"] for s in view["steps"]}
    assert not list((ws.root / "checkpoints" / view["run_id"]).glob("grpo*"))  # nothing trained for the stage


def test_the_models_choice_to_run_the_align_stage_trains_it(tmp_path, engineer):
    ScriptedOpenAI.answers[AlignChoice] = lambda body: json.dumps({"run": True, "reason": "scripted: train grpo"})
    ws, view, _ = _run(tmp_path, ALIGN_TASK, engineer)
    (asked,) = ScriptedOpenAI.decisions(AlignChoice)  # asked once, with the evidence and the offline proposal
    evidence = evidence_of(asked)
    assert evidence["stage"] == "grpo" and evidence["align_min_headroom"] == 1.0 and "exact_match" in evidence["judged"]
    assert '"run": false' in asked["messages"][-1]["content"]  # the default shown: the offline policy would skip
    node = _decision(ws, "/align#1/align_choice")
    assert (node["decision"], node["decided_by"], node["reason"]) == ("run", MODEL, "scripted: train grpo")
    align = _output(ws, view, "align")
    assert align["outcome"] == "ok" and align["metrics"]["grpo.steps"] == 2
    ckpt = Path(align["artifacts"]["checkpoint"])
    assert ckpt.parent.name.startswith("grpo") and (ckpt / "model.safetensors").is_file()
    steps = {s["name"]: s["status"] for s in view["steps"]}
    assert steps["evaluate_align"] == "completed" and steps["gate_align"] == "completed"
    assert _output(ws, view, "evaluate_align")["artifacts"]["checkpoint"] == str(ckpt)
    # the persona's step conversations went to the same model, not only its decision
    assert _steps_on_the_model() == sorted(ENGINEER_STEPS)
    transcript = json.loads((ws.root / "transcripts" / view["run_id"] / "align#1.json").read_text())
    assert transcript["model"].startswith(f"{MODEL} @ http://127.0.0.1:")


def test_a_malformed_answer_keeps_the_offline_skip_with_a_warning_and_the_key_stays_secret(tmp_path, engineer):
    answers = iter(['{"run": tr', json.dumps({"run": "perhaps"})])
    ScriptedOpenAI.answers[AlignChoice] = lambda body: next(answers)  # cut-off JSON, then the wrong shape
    ws, view, stderr = _run(tmp_path, ALIGN_TASK, engineer)
    assert len(ScriptedOpenAI.decisions(AlignChoice)) == 2  # one retry, then the offline policy decides
    align = _output(ws, view, "align")
    assert align["outcome"] == "skipped" and align["details"]["decided_by"] == "offline"
    node = _decision(ws, "/align#1/align_choice")
    assert (node["decision"], node["decided_by"]) == ("skip", "offline")
    warning = node["warning"]
    assert warning.startswith(f"training_engineer: {MODEL} at http://127.0.0.1:") and "AlignChoice" in warning
    assert "kept the offline policy's decision" in warning and "\n" not in warning
    assert align["details"]["warning"] == warning and warning in stderr  # the person running it sees it
    assert "evaluate_align" not in {s["name"] for s in view["steps"]}
    # the key went to the server in the Authorization header, and nowhere else
    assert set(ScriptedOpenAI.auth) == {f"Bearer {API_KEY}"}
    assert API_KEY not in json.dumps(ScriptedOpenAI.requests)
    leaks = [str(p) for p in ws.root.rglob("*") if p.is_file() and API_KEY.encode() in p.read_bytes()]
    assert leaks == [] and API_KEY not in stderr


# ----------------------------------------------------------------------------------------- recipe
def _search(ws: Workspace, view: dict) -> tuple[dict, dict]:
    train = _output(ws, view, "train")
    return train, train["details"]["search"]["pretrain"]


def test_the_models_pick_of_another_probe_is_the_learning_rate_the_stage_trains_at(tmp_path, engineer):
    def another_probe(body: dict) -> str:
        ev = evidence_of(body)  # the probes' held-out numbers, as the decision was asked
        other = next(p for p in ev["probes"] if p["trial"] != ev["best_trial"] and p["values"] and not p["unstable"])
        return json.dumps({"trial": other["trial"], "reason": "scripted: not the lowest loss"})

    ScriptedOpenAI.answers[RecipeChoice] = another_probe
    ws, view, _ = _run(tmp_path, RECIPE_TASK, engineer)
    train, search = _search(ws, view)
    (asked,) = ScriptedOpenAI.decisions(RecipeChoice)
    trials = [p["trial"] for p in search["probes"]]  # the 3 rates, and any the search added beyond the range's edge
    assert [p["trial"] for p in evidence_of(asked)["probes"]] == trials == list(range(3 + len(search["widened"])))
    assert evidence_of(asked)["comparisons"]  # the model reads each rung's comparison, as the offline pick did
    best = next(p for p in search["probes"] if p["trial"] == search["best_trial"])
    picked = json.loads(another_probe(asked))["trial"]
    lr = next(p["learning_rate"] for p in search["probes"] if p["trial"] == picked)
    assert picked != search["best_trial"] and lr != best["learning_rate"]
    assert search["decided_by"] == MODEL and search["chosen"]["learning_rate"] == lr
    assert f"trial {picked} (lr {lr:g}): scripted: not the lowest loss" in search["reasons"]
    assert _trained_lr(train) == lr and train["metrics"]["pretrain.steps"] == 24  # trained at it, the given length
    node = _decision(ws, "/pretrain/recipe")
    assert node["decided_by"] == MODEL and node["chosen"]["learning_rate"] == lr
    assert "train" in _steps_on_the_model()


def test_a_pick_of_a_probe_that_does_not_exist_is_refused_and_the_offline_best_trains(tmp_path, engineer):
    ScriptedOpenAI.answers[RecipeChoice] = lambda body: json.dumps({"trial": 99, "reason": "scripted: made up"})
    ws, view, _ = _run(tmp_path, RECIPE_TASK, engineer)
    train, search = _search(ws, view)
    asked = ScriptedOpenAI.decisions(RecipeChoice)
    assert len(asked) == 2  # refused once with the reason, then the offline policy decides
    told = [m["content"] for m in asked[1]["messages"] if m["role"] == "tool"]
    assert told and "refused: trial 99 is not a stable probe" in told[-1]
    best = next(p for p in search["probes"] if p["trial"] == search["best_trial"])
    assert search["decided_by"] == "offline" and search["chosen"]["learning_rate"] == best["learning_rate"]
    (warning,) = [r for r in search["reasons"] if "kept the offline policy's decision" in r]
    assert warning.startswith(f"training_engineer: {MODEL} at http://127.0.0.1:")
    stable = sorted(p["trial"] for p in search["probes"] if p["values"] and not p["unstable"])
    assert f"answer refused: trial 99 is not a stable probe {stable}" in warning
    assert _trained_lr(train) == best["learning_rate"]
    assert _decision(ws, "/pretrain/recipe")["decided_by"] == "offline"
