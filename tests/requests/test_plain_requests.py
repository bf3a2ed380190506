"""Requests as different people write them: the task each one gives, the defaults its plan states
before anything runs, and the refusals that still name the missing piece."""

from __future__ import annotations

import json

import pytest
from persona_helpers import cli
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from trainteam.core.errors import BadInput
from trainteam.workflows.requests.request_rules import read_request
from trainteam.workflows.requests.submission import DEMO_REQUEST, parse_request, plan_request

TINY = {"arch": "llama", "hidden_size": 128, "num_layers": 2, "num_heads": 4}


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A user's data files and a local model folder a request can name, relative to the cwd."""
    (tmp_path / "data").mkdir()
    row = json.dumps({"prompt": "2+2=", "completion": "4"}) + "\n"
    for name in ("train.jsonl", "eval.jsonl", "chats.jsonl"):
        (tmp_path / "data" / name).write_text(row * 8)
    (tmp_path / "data" / "train.csv").write_text("prompt,completion\n" + "2+2=,4\n" * 8)
    for folder in ("base", "models/smol"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "config.json").write_text(
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
        (tmp_path / folder / "model.safetensors").write_bytes(b"\x02\x00\x00\x00\x00\x00\x00\x00{}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _plan(text: str, model=None):
    task = parse_request(text, model=model)
    return task, plan_request(task, request=text)


def _has(defaults: list[str], *needles: str) -> None:
    assert any(all(n in d for n in needles) for d in defaults), (needles, defaults)


SEARCHED = "the training engineer's recipe search chooses them"
# text, what the task holds (field -> value), what the plan's defaults state (each a tuple of
# phrases one line holds), and what it must not state.
PEOPLE = [
    # the three requests that name everything, refused before
    (
        "Use the built-in arithmetic demo data to pretrain a tiny llama; budget 20 minutes",
        {"model": TINY, "data.demo": "addition", "stages": ["pretrain"], "budget": 20, "gates": {}},
        [
            ("data: 'arithmetic' names no operation", "addition demo"),
            ("20,000 training problems", "200 held out"),
            ("training.pretrain: learning_rate, max_steps, per_device_train_batch_size", SEARCHED),
        ],
        ["model:"],
    ),
    (
        "Pretrain a tiny llama on the addition demo. Budget: 15 CPU minutes",
        {"model": TINY, "data.demo": "addition", "stages": ["pretrain"], "budget": 15},
        [("training.pretrain", SEARCHED)],
        ["data: '"],
    ),
    (
        "Train a from-scratch model for the addition demo task within 10 minutes",
        {"model": TINY, "data.demo": "addition", "stages": ["pretrain"], "budget": 10},
        [("model: none named; a tiny llama", "hidden 128, 2 layers, 4 heads")],
        [],
    ),
    # the rest, as different people write them
    (
        "I'd like a small GPT-2 trained on subtraction from scratch, then fine-tuned; we have half an hour.",
        {
            "model.arch": "gpt2",
            "model.hidden_size": 256,
            "model.num_layers": 4,
            "data.demo": "subtraction",
            "stages": ["pretrain", "sft"],
            "budget": 30,
        },
        [("training.pretrain", SEARCHED), ("training.sft", SEARCHED)],
        ["model:"],
    ),
    (
        "fine-tune the model in ./models/smol on data/chats.jsonl, 1.5 hours max",
        {
            "model.path": "models/smol",
            "data.path": "data/chats.jsonl",
            "data.eval_path": None,
            "stages": ["sft"],
            "budget": 90,
        },
        [("no held-out file named", "a seeded 10% of its rows"), ("training.sft", SEARCHED)],
        ["model:"],
    ),
    (
        "the bundled demo, then align it with GRPO, at least 90% accuracy, under 10 minutes",
        {
            "model": TINY,
            "data.demo": "addition",
            "stages": ["pretrain", "grpo"],
            "budget": 10,
            "gates": {"grpo": 0.9},
        },  # the gate is in GRPO's clause
        [
            ("data: 'bundled demo' names no operation",),
            ("model: none named",),
            ("stages: pretrain first", "grpo"),
            ("training.grpo: learning_rate not said", "GRPO's default 1e-05"),
            ("training.grpo: max_steps 100, per_device_train_batch_size 8 not said", "library defaults"),
        ],
        ["'align' names"],
    ),
    (
        "Multiplication tables on a tiny qwen2: pretrain, then reinforcement learning; 90 percent exact match; 45 min",
        {
            "model.arch": "qwen2",
            "data.demo": "multiplication",
            "stages": ["pretrain", "grpo"],
            "budget": 45,
            "gates": {"pretrain": 0.9},
        },
        [("training.grpo: learning_rate not said",)],
        [],
    ),
    (
        "90 seconds: a tiny llama on 2-digit addition with 500 problems",
        {"model": TINY, "data.n_train": 500, "data.max_operand": 99, "stages": ["pretrain"], "budget": 1.5},
        [("stages: none named; pretrain",), ("data: 200 held out (the demo's defaults)",)],
        ["20,000"],
    ),
    (
        (
            "Budget 1 hour 30 minutes. Pretrain a llama (hidden 64, 2 layers, 2 heads) on the addition demo "
            "for 300 steps at learning rate 0.001, then SFT it"
        ),
        {
            "model.hidden_size": 64,
            "model.num_heads": 2,
            "stages": ["pretrain", "sft"],
            "budget": 90,
            "training.pretrain.max_steps": 300,
        },
        [
            ("training.pretrain: per_device_train_batch_size 8 not said", "library defaults", "not searched"),
            ("training.sft", SEARCHED),
        ],
        ["training.pretrain: learning_rate"],
    ),
    (
        "SFT a tiny llama on data/train.jsonl and evaluate on data/eval.jsonl; no recipe search; 20 min",
        {
            "model": TINY,
            "data.path": "data/train.jsonl",
            "data.eval_path": "data/eval.jsonl",
            "stages": ["pretrain", "sft"],
            "budget": 20,
            "search.enabled": False,
        },
        [
            ("stages: pretrain first, then sft",),
            (
                "training.sft: learning_rate 0.0003, max_steps 100, per_device_train_batch_size 8 not said",
                "library defaults",
            ),
        ],
        [SEARCHED, "no held-out file"],
    ),
    (
        "Teach a tiny llama three-digit addition on the built-in demo with 5000 training problems; two hours",
        {"data.max_operand": 999, "data.n_train": 5000, "budget": 120},
        [("data: 200 held out",)],
        ["training problems (the demo"],
    ),
    (
        (
            "fine-tune a tiny llama on data/train.csv, hold out 5% for eval, gate at 80% exact match, "
            "a quarter of an hour"
        ),
        {
            "data.path": "data/train.csv",
            "data.eval_fraction": 0.05,
            "stages": ["pretrain", "sft"],
            "budget": 15,
            "gates": {"sft": 0.8},
        },
        [("a seeded 5% of its rows",)],
        [],
    ),
    (
        "Give me a tiny llama that does sums, pretrain then SFT, spend at most 2 hours and stop when it hits 95%",
        {"data.demo": "addition", "stages": ["pretrain", "sft"], "budget": 120, "gates": {"sft": 0.95}},
        [("training.sft", SEARCHED)],
        [],
    ),
    (
        "twenty minutes, tiny llama, addition demo, then DPO",
        {"stages": ["pretrain", "dpo"], "budget": 20},
        [("training.dpo: learning_rate not said", "DPO's default 5e-06")],
        [],
    ),
    (
        "an hour and a half for a tiny gpt2 on the subtraction demo",
        {"model.arch": "gpt2", "data.demo": "subtraction", "budget": 90},
        [("stages: none named; pretrain",)],
        [],
    ),
]


def _value(task, field: str):
    if field == "budget":
        return task.budget.max_wall_minutes
    if field == "gates":
        return {k: g.min for k, g in task.gates.items()}
    if field == "model":
        return {k: getattr(task.model, k) for k in TINY}
    value = task
    for part in field.split("."):
        value = value[part] if isinstance(value, dict) else getattr(value, part)
    return value


@pytest.mark.parametrize("text, expected, stated, unstated", PEOPLE, ids=[p[0][:36] for p in PEOPLE])
def test_requests_as_people_write_them(files, text, expected, stated, unstated):
    task, plan = _plan(text)
    for field, value in expected.items():
        got = _value(task, field)
        if field.endswith("path") and value is not None:
            value = (files / value).resolve()
        assert got == value, f"{field}: {got!r} != {value!r}"
    for needles in stated:
        _has(plan.defaults, *needles)
    for needle in unstated:
        assert not any(needle in d for d in plan.defaults), (needle, plan.defaults)
    assert not any(d.startswith("budget") for d in plan.defaults)  # a budget is never a default
    chosen = plan.understood + plan.defaults  # each model, data and stage choice: the words quoted, or a default
    assert all(any(line.startswith(f"{field}:") for line in chosen) for field in ("model", "data")), chosen
    assert all(any(line.startswith("stages:") and stage in line for line in chosen) for stage in task.stages), chosen


def test_a_request_that_states_everything_has_no_defaults():
    _, plan = _plan(DEMO_REQUEST)
    assert plan.defaults == []
    assert "default:" not in plan.text()


REFUSED = [
    ("pretrain a tiny llama on the bundled addition demo", "budget: give a time limit"),
    ("fine-tune a tiny llama on my chat logs, 20 minutes", "data: name the bundled demo"),
    ("fine-tune on data/train.jsonl for 20 minutes", "model: say which model"),
    ("train a model on addition in 10 minutes", "model: say which model"),  # no demo named, nor from scratch
    ("train on the addition demo within 30 minutes", "model: say which model"),  # not "built-in", nor from scratch
    ("a tiny llama on the addition demo, no time limit", "budget: a run never spends without a ceiling"),
    ("a tiny llama on the built-in demo, take as long as it takes", "budget: a run never spends without a ceiling"),
    (
        "fine-tune the model at base on data/train.jsonl, then align it; 20 minutes",
        "stages: 'align' names no method; say DPO",
    ),
]


@pytest.mark.parametrize("text, needle", REFUSED, ids=[t[:36] for t, _ in REFUSED])
def test_what_cannot_be_known_is_still_refused(files, text, needle):
    with pytest.raises(BadInput) as err:
        parse_request(text)
    assert needle in str(err.value) and "\n" not in str(err.value), str(err.value)


def _provider_answering(task_fields: dict) -> FunctionModel:
    """Stands in for a configured provider: returns the TrainTask as structured output."""

    def answer(messages, info):
        name = next(t.name for t in info.output_tools if "Refusal" not in t.name)
        return ModelResponse(parts=[ToolCallPart(name, task_fields, tool_call_id="x")])

    return FunctionModel(answer)


def test_a_provider_answering_as_the_reader_does_is_accepted_with_the_same_defaults(files):
    text = "Train a from-scratch model for the built-in arithmetic demo; then align it; half an hour"
    offline, offline_plan = _plan(text)
    same = read_request(text).fields  # the offline reader's own answer, defaults filled in
    task, plan = _plan(text, model=_provider_answering(same))
    assert task == offline and plan.defaults == offline_plan.defaults
    _has(plan.defaults, "model: none named; a tiny llama")
    _has(plan.defaults, "stages: 'align' names no method; GRPO")
    bare = {
        "name": "addition",
        "model": {},
        "data": {"demo": "addition"},
        "budget": {"max_wall_minutes": 30},
        "stages": ["pretrain", "grpo"],
    }  # ModelSpec's defaults are the tiny llama too
    assert _plan(text, model=_provider_answering(bare))[0].model == offline.model


def test_a_provider_choice_where_the_request_says_nothing_is_stated_as_its_own(files):
    text = "the addition demo from scratch, 10 minutes"
    bigger = {
        "name": "addition",
        "model": {"hidden_size": 256, "num_layers": 4},
        "data": {"demo": "addition"},
        "budget": {"max_wall_minutes": 10},
    }
    task, plan = _plan(text, model=_provider_answering(bigger))
    assert task.model.hidden_size == 256  # the shape is judgement (the planner and the budget bound it)
    _has(plan.defaults, "model: not said in the request; the orchestrator's model chose", "hidden 256 x 4 layers")
    assert not any("tiny llama" in d for d in plan.defaults)


def test_a_provider_cannot_fill_what_the_reader_refuses(files):
    built = {
        "name": "t",
        "model": {},
        "data": {"path": "data/train.jsonl"},
        "budget": {"max_wall_minutes": 20},
        "stages": ["pretrain", "sft"],
    }
    with pytest.raises(BadInput, match="model: say which model"):
        parse_request("fine-tune on data/train.jsonl for 20 minutes", model=_provider_answering(built))
    hour = {"name": "addition", "model": {}, "data": {"demo": "addition"}, "budget": {"max_wall_minutes": 60}}
    with pytest.raises(
        BadInput,
        match="budget.max_wall_minutes: 60 minutes is not written in the request "
        r"\(it states: 30\)",
    ):
        parse_request("the built-in demo from scratch, half an hour", model=_provider_answering(hour))
    assert (
        parse_request(
            "the built-in demo from scratch, half an hour",
            model=_provider_answering({**hour, "budget": {"max_wall_minutes": 30}}),
        ).budget.max_wall_minutes
        == 30
    )


def test_submit_plan_only_states_the_defaults(tmp_path):
    ws = tmp_path / "ws"
    proc = cli(
        ws,
        "submit",
        "Train a from-scratch model for the built-in arithmetic demo. Budget: 15 CPU minutes",
        "--plan-only",
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    defaults = [line for line in lines if line.startswith("  default: ")]
    assert any("model: none named; a tiny llama" in d for d in defaults), proc.stdout
    assert any("'arithmetic' names no operation" in d for d in defaults), proc.stdout
    assert any(SEARCHED in d for d in defaults), proc.stdout
    assert "  data: bundled demo 'addition'" in proc.stdout and "budget 15 min" in proc.stdout
    assert lines.index(defaults[0]) < lines.index("# task")  # stated in the plan, before the task
    assert not ws.exists()  # nothing written by --plan-only
