"""Natural-language submission: accepted phrasings give the expected TrainTask, refused ones name what is missing."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from persona_helpers import cli
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from trainteam.contract.train_task import TrainTask, load_task_file
from trainteam.core.errors import BadInput
from trainteam.workflows.requests.submission import DEMO_REQUEST, parse_request, plan_request


def _get(task, dotted: str):
    value = task
    for part in dotted.split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


@pytest.fixture
def files(tmp_path, monkeypatch):
    """Local data files a request can name, relative to the working directory."""
    (tmp_path / "data").mkdir()
    row = json.dumps({"prompt": "2+2=", "completion": "4"}) + "\n"
    for name in ("train.jsonl", "eval.jsonl", "dev.jsonl"):
        (tmp_path / "data" / name).write_text(row * 4)
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "config.json").write_text(
        json.dumps(
            {
                "model_type": "llama",
                "hidden_size": 64,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "intermediate_size": 256,
                "vocab_size": 300,
                "max_position_embeddings": 128,
            }
        )
    )
    (tmp_path / "base" / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")  # sound, empty
    monkeypatch.chdir(tmp_path)
    return tmp_path


ACCEPTED = [
    (
        "pretrain a tiny llama on the addition demo, budget 20 minutes",
        {
            "model.arch": "llama",
            "model.hidden_size": 128,
            "data.demo": "addition",
            "budget.max_wall_minutes": 20,
            "stages": ["pretrain"],
            "name": "addition",
        },
    ),
    (
        "Train a small GPT-2 from scratch on subtraction problems within 1 hour",
        {
            "model.arch": "gpt2",
            "model.hidden_size": 256,
            "model.num_layers": 4,
            "data.demo": "subtraction",
            "budget.max_wall_minutes": 60,
            "stages": ["pretrain"],
        },
    ),
    (
        "teach a tiny qwen2 multiplication; max 45 min",
        {"model.arch": "qwen2", "data.demo": "multiplication", "budget.max_wall_minutes": 45},
    ),
    (
        "Pretrain then SFT a tiny llama on addition for 15 minutes",
        {"stages": ["pretrain", "sft"], "budget.max_wall_minutes": 15},
    ),
    (
        "tiny llama, hidden 64, 2 layers, 2 heads, on adding numbers, budget 10 min",
        {"model.hidden_size": 64, "model.num_layers": 2, "model.num_heads": 2, "data.demo": "addition"},
    ),
    (
        "tiny llama from scratch on addition with 5000 training problems and 100 held out, budget 10 minutes",
        {"data.n_train": 5000, "data.n_eval": 100},
    ),
    ("tiny llama on addition of two-digit numbers, budget 10 minutes", {"data.max_operand": 99}),
    ("tiny llama on three-digit addition, budget 10 minutes", {"data.max_operand": 999}),
    (
        "pretrain a tiny llama on addition for 200 steps at batch 16, learning rate 0.001; budget 10 minutes",
        {
            "training.pretrain.max_steps": 200,
            "training.pretrain.per_device_train_batch_size": 16,
            "training.pretrain.learning_rate": 0.001,
        },
    ),
    (
        "pretrain a tiny llama on addition, then SFT for 400 steps; gate SFT at 85% exact match; budget 20 min",
        {"stages": ["pretrain", "sft"], "training.sft.max_steps": 400, "gates.sft.min": 0.85},
    ),
    ("tiny llama on addition, accuracy of at least 0.7, budget 10 minutes", {"gates.pretrain.min": 0.7}),
    ("tiny llama on addition, budget 30 minutes, call it sums-v2", {"name": "sums-v2"}),
    ("tiny llama on addition, budget 10 minutes, retry once if the gate fails", {"allow_retry": True}),
    (
        "tiny llama on addition, budget 10 minutes, ask me before training",
        {
            "require_approval": [
                *TrainTask.model_fields["require_approval"].get_default(call_default_factory=True),
                "train",
            ]
        },
    ),
    ("tiny llama on addition with a tokenizer vocabulary of 320, budget 10 minutes", {"tokenizer.vocab_size": 320}),
    (
        "tiny llama on addition, $2 at $4 per hour",
        {"budget.max_cost_usd": 2, "budget.cost_per_hour_usd": 4, "budget.max_wall_minutes": 30},
    ),
    (
        "fine-tune a tiny llama on data/train.jsonl, evaluate on data/eval.jsonl, budget 10 minutes",
        {"data.path": "data/train.jsonl", "data.eval_path": "data/eval.jsonl", "stages": ["pretrain", "sft"]},
    ),
    (
        "fine-tune a tiny llama on data/train.jsonl, budget 10 minutes",  # held-out rows: data.eval_fraction
        {"data.path": "data/train.jsonl", "data.eval_path": None, "data.eval_fraction": 0.1},
    ),
    (
        "SFT the model at base on data/train.jsonl and data/dev.jsonl within 2 hours",
        {
            "model.path": "base",
            "data.path": "data/train.jsonl",
            "data.eval_path": "data/dev.jsonl",
            "stages": ["sft"],
            "budget.max_wall_minutes": 120,
        },
    ),
    ("tiny llama, context 128, on addition, budget 5 minutes", {"model.max_position_embeddings": 128}),
    (
        "sft a small qwen on subtraction, lr 3e-4, 500 steps, 45 min budget",
        {"stages": ["pretrain", "sft"], "training.sft.max_steps": 500, "training.sft.learning_rate": 3e-4},
    ),
    (
        "train a tiny llama to add numbers up to 50 for 10 minutes, seed 3",
        {"data.max_operand": 50, "data.seed": 3, "budget.max_wall_minutes": 10},
    ),
    (
        "Please pretrain a tiny llama on 2-digit addition and then fine-tune it; I want 90% accuracy; "
        "spend at most 30 minutes.",
        {"stages": ["pretrain", "sft"], "gates.sft.min": 0.9, "data.max_operand": 99},
    ),
    ("tiny llama on addition with 20,000 problems, budget 20 minutes", {"data.n_train": 20000}),
    (
        "pretrain a llama, hidden 32, 1 layer, 1 head, on addition with 400 problems and 16 held out, for 6 steps "
        "at batch 8, sequence length 32; budget 10 minutes",
        {
            "model.hidden_size": 32,
            "model.num_layers": 1,
            "model.num_heads": 1,
            "data.n_train": 400,
            "data.n_eval": 16,
            "training.pretrain.max_steps": 6,
            "training.pretrain.per_device_train_batch_size": 8,
            "training.pretrain.max_length": 32,
        },
    ),
    (
        "pretrain a tiny llama on addition then GRPO with 4 generations; budget 20 minutes",
        {"stages": ["pretrain", "grpo"], "training.grpo.grpo.num_generations": 4},
    ),
]

REFUSED = [
    ("train something nice", ["model:", "data:", "budget:"]),
    ("pretrain a tiny llama on addition", ["budget:", "never starts without one"]),
    ("pretrain a tiny llama on my dataset, budget 10 minutes", ["data:", "never guesses a data path"]),
    ("train a model on addition in 10 minutes", ["model:"]),
    ("pretrain a tiny llama on addition with no budget", ["budget:", "ceiling"]),
    (
        "download llama from the hugging face hub and train it on addition, 10 minutes",
        ["model:", "nothing is downloaded"],
    ),
    (
        "fine-tune a tiny llama on data/missing.jsonl and data/eval.jsonl, budget 10 minutes",
        ["data.path", "does not exist"],
    ),
    ("tiny llama on addition, $5", ["budget.max_wall_minutes"]),
    ("tiny llama on addition in 0 minutes", ["budget.max_wall_minutes"]),
    ("tiny llama, hidden 100, 3 heads, on addition, 10 minutes", ["hidden_size 100 is not divisible by num_heads 3"]),
    ("pretrain a 7B llama on addition for 100000 steps, budget 10 minutes", ["training.pretrain"]),
    (
        "pretrain a tiny llama on addition for 2000000 steps at batch 64, budget 1 minute",
        ["budget.max_wall_minutes", "over the 1 min budget"],
    ),
    ("", ["request: empty"]),
]


@pytest.mark.parametrize("text,expected", ACCEPTED, ids=[t[:40] for t, _ in ACCEPTED])
def test_accepted_phrasings_give_the_expected_task(files, text, expected):
    task = parse_request(text)
    for field, value in expected.items():
        got = _get(task, field)
        if field.endswith(("path", "eval_path")) and value is not None:
            assert got == (files / value).resolve(), field
        else:
            assert got == value, f"{field}: {got!r} != {value!r}"


@pytest.mark.parametrize("text,needles", REFUSED, ids=[t[:40] or "empty" for t, _ in REFUSED])
def test_refused_phrasings_name_what_is_missing(files, text, needles):
    with pytest.raises(BadInput) as err:
        parse_request(text)
    message = str(err.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message


def test_the_demo_request_is_the_bundled_demo_task():
    ref = resources.files("trainteam.workflows").joinpath("examples/addition.yaml")
    with resources.as_file(ref) as path:
        expected = load_task_file(path)
    got = parse_request(DEMO_REQUEST)
    assert got.model_dump(exclude={"description"}) == expected.model_dump(exclude={"description"})
    from trainteam.workflows.engine.spec import load_builtin

    plan = plan_request(got, steps=load_builtin(got.workflow).describe_steps(got.stages))
    assert [s["stage"] for s in plan.stages] == list(expected.stages)
    assert 0 < plan.est_minutes <= expected.budget.max_wall_minutes
    assert any(step.startswith("register_model") for step in plan.steps)


def _provider_answering(task_fields: dict) -> FunctionModel:
    """Stands in for a real provider: returns the TrainTask as structured output."""

    def answer(messages, info):
        name = next(t.name for t in info.output_tools if "Refusal" not in t.name)
        return ModelResponse(parts=[ToolCallPart(name, task_fields, tool_call_id="x")])

    return FunctionModel(answer)


def test_a_model_that_guesses_a_data_path_is_refused(files):
    guessed = {
        "name": "t",
        "model": {},
        "data": {"path": "data/train.jsonl", "eval_path": "data/eval.jsonl"},
        "budget": {"max_wall_minutes": 10},
        "stages": ["pretrain"],
    }
    with pytest.raises(BadInput, match="data.path: data/train.jsonl is not written in the request"):
        parse_request("pretrain a tiny llama on my usual data, 10 minutes", model=_provider_answering(guessed))
    ok = parse_request(
        "pretrain a tiny llama on data/train.jsonl with data/eval.jsonl held out, 10 minutes",
        model=_provider_answering(guessed),
    )
    assert ok.data.path == (files / "data/train.jsonl").resolve()


def test_a_model_that_invents_a_budget_is_refused(files):
    invented = {
        "name": "t",
        "model": {},
        "data": {"demo": "addition"},
        "budget": {"max_wall_minutes": 60},
        "stages": ["pretrain"],
    }
    with pytest.raises(BadInput, match="budget: give a time limit"):
        parse_request("pretrain a tiny llama on addition", model=_provider_answering(invented))
    with pytest.raises(BadInput, match="budget: a run never spends without a ceiling"):
        parse_request("pretrain a tiny llama on addition, no budget", model=_provider_answering(invented))


def test_submit_cli_plan_only_json_and_refusal(tmp_path):
    ws = tmp_path / "ws"
    ok = cli(ws, "submit", "pretrain a tiny llama on addition for 50 steps, budget 5 minutes", "--plan-only", "--json")
    assert ok.returncode == 0, ok.stderr
    out = json.loads(ok.stdout)
    assert out["task"]["data"]["demo"] == "addition" and out["task"]["training"]["pretrain"]["max_steps"] == 50
    assert out["plan"]["stages"][0]["stage"] == "pretrain" and out["plan"]["est_minutes"] > 0
    bad = cli(ws, "submit", "pretrain a tiny llama on addition", "--plan-only")
    assert bad.returncode == 2 and bad.stdout == ""
    lines = bad.stderr.strip().splitlines()
    assert len(lines) == 1 and "budget" in lines[0] and "Traceback" not in bad.stderr
    declined = cli(ws, "submit", "pretrain a tiny llama on addition, budget 5 minutes", input="n\n")
    assert declined.returncode == 1 and "not started" in declined.stderr
    assert "exact_match" in declined.stderr or "stages: pretrain" in declined.stderr  # the plan was shown first
    assert not (ws / "trainteam.db").exists()  # nothing written before a person confirms


def test_a_request_can_turn_gradient_clipping_off():
    t = parse_request(
        "SFT a tiny llama on the addition demo for 100 steps without gradient clipping, budget 10 minutes",
        check_plan=False,
    )
    assert t.training["sft"].max_grad_norm >= 1e9
    kept = parse_request("SFT a tiny llama on the addition demo for 100 steps, budget 10 minutes", check_plan=False)
    assert "sft" not in kept.training or kept.training["sft"].max_grad_norm == 1.0
