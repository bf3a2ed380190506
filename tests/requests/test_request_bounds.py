"""Requests in plain words are bounded: a length limit, linear-time reading, finite numbers in
range, and a model's answer held to what the request says (budget, overrides, trust_remote_code)."""

from __future__ import annotations

import pytest
from cpu_clock import cpu_seconds
from persona_helpers import cli
from pydantic_ai.messages import ModelResponse, ToolCallPart
from pydantic_ai.models.function import FunctionModel

from trainteam.core.errors import BadInput
from trainteam.workflows.requests.request_rules import MAX_REQUEST_CHARS, read_request
from trainteam.workflows.requests.submission import DEMO_REQUEST, parse_request

BASE = "pretrain a tiny llama on the addition demo, "


def _refusal(text: str, model=None) -> str:
    with pytest.raises(BadInput) as info:
        parse_request(text, model=model, check_plan=False)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_a_long_request_is_refused_at_once():
    with cpu_seconds() as spent:  # CPU seconds, not wall: a busy machine must not fail it
        message = _refusal(BASE + "budget 30 minutes. " + "Please be careful. " * 400)
    assert spent.seconds < 2
    assert message.startswith("request: ") and f"over the limit of {MAX_REQUEST_CHARS:,}" in message


def test_the_demo_request_fits_well_within_the_limit():
    assert len(DEMO_REQUEST) < MAX_REQUEST_CHARS / 2
    assert parse_request(DEMO_REQUEST, check_plan=False).budget.max_wall_minutes == 30


def test_an_8000_digit_request_finishes_fast():
    with cpu_seconds() as spent:
        assert "over the limit" in _refusal("9" * 8000)
    assert spent.seconds < 2


HOSTILE = ["9", "1,", "1.", "1_", "1e", "a", "a/", "eval", "save", "seq_len", "ask ", "x.json", "-1", "$1", "1 "]


@pytest.mark.parametrize("unit", HOSTILE)
def test_hostile_text_just_under_the_limit_reads_fast(unit):
    """Every pattern is linear: text that made a pattern rescan the rest at every start
    (a run of digits, of letters, of paths, of keywords) reads in well under a second."""
    text = (unit * MAX_REQUEST_CHARS)[:MAX_REQUEST_CHARS]
    with cpu_seconds() as spent:
        read_request(text)
    assert spent.seconds < 2


REFUSED = {
    "set budget to 9999 hours": "9999 hours is 599,940 minutes, over the ceiling of 43,200 minutes",
    "budget -5 minutes": "budget.max_wall_minutes: -5 minutes is not a positive time limit",
    "budget 1e999 minutes": "budget.max_wall_minutes: 1e999 is not a finite number",
    "budget 0 minutes": "not a positive time limit",
    "budget 30 minutes and -$5": "budget.max_cost_usd: -5 is negative",
    "budget 30 minutes, learning rate 1e999": "training.learning_rate: 1e999 is not a finite number",
    "budget 30 minutes for 1e999 steps": "training.max_steps: 1e999 is not a finite number",
    "budget " + "9" * 400 + " minutes": "is not a finite number",
}


@pytest.mark.parametrize("tail", sorted(REFUSED))
def test_numbers_out_of_range_are_refused(tail):
    message = _refusal(BASE + tail)
    assert REFUSED[tail] in message and len(message) < 300, message


@pytest.mark.parametrize(
    "tail, expected",
    [
        (" \x1b[2J\x1b]0;x\x07", "request: holds a control character (\\x1b at position"),
        ("\x00", "request: holds a control character (\\x00 at position"),
        (", with trust_remote_code: true", "model.trust_remote_code: a request cannot turn it on"),
    ],
)
def test_control_characters_and_remote_code_are_refused(tail, expected):
    assert _refusal(BASE + "budget 30 minutes" + tail).startswith(expected)


def test_saying_remote_code_stays_off_is_fine():
    assert not parse_request(
        BASE + "budget 30 minutes, without trust_remote_code", check_plan=False
    ).model.trust_remote_code


def test_numbers_in_range_still_read():
    assert parse_request(BASE + "budget 2 hours", check_plan=False).budget.max_wall_minutes == 120
    assert parse_request(BASE + "budget 10-30 minutes", check_plan=False).budget.max_wall_minutes == 30
    t = parse_request(BASE + "budget $10 at $2 per hour", check_plan=False)
    assert (t.budget.max_wall_minutes, t.budget.max_cost_usd, t.budget.cost_per_hour_usd) == (300, 10, 2)


def _provider_answering(task_fields: dict) -> FunctionModel:
    """Stands in for a configured provider: returns the TrainTask as structured output."""

    def answer(messages, info):
        name = next(t.name for t in info.output_tools if "Refusal" not in t.name)
        return ModelResponse(parts=[ToolCallPart(name, task_fields, tool_call_id="x")])

    return FunctionModel(answer)


ASKED = BASE + "budget 30 minutes"
HONEST = {
    "name": "addition",
    "model": {},
    "data": {"demo": "addition"},
    "budget": {"max_wall_minutes": 30},
    "stages": ["pretrain"],
}


def test_a_model_answer_within_the_request_is_accepted():
    task = parse_request(ASKED, model=_provider_answering(HONEST), check_plan=False)
    assert task.budget.max_wall_minutes == 30 and not task.model.trust_remote_code


def test_a_model_answer_beyond_the_request_is_refused():
    greedy = {
        **HONEST,
        "model": {"trust_remote_code": True},
        "budget": {"max_wall_minutes": 99_999, "max_cost_usd": 5000, "cost_per_hour_usd": 50},
    }
    message = _refusal(ASKED, _provider_answering(greedy))  # BudgetSpec's 30-day bound, or the grounding
    assert message.startswith(
        ("request: budget.max_wall_minutes:", "model.trust_remote_code:", "budget.max_wall_minutes:")
    ), message
    trusting = {**HONEST, "model": {"trust_remote_code": True}}
    assert _refusal(ASKED, _provider_answering(trusting)).startswith(
        "model.trust_remote_code: a request cannot turn it on; only your own task file can"
    )
    written = ASKED + ", trust_remote_code: true"  # not even when the request says so
    assert _refusal(written, _provider_answering(trusting)).startswith("model.trust_remote_code:")
    within_bounds = {**HONEST, "budget": {"max_wall_minutes": 600, "max_cost_usd": 5000}}  # valid, but not asked
    assert _refusal(ASKED, _provider_answering(within_bounds)).startswith(
        "budget.max_wall_minutes: 600 minutes is not written in the request (it states: 30)"
    )
    money = {**HONEST, "budget": {"max_wall_minutes": 30, "max_cost_usd": 5000}}
    assert _refusal(ASKED, _provider_answering(money)).startswith("budget.max_cost_usd: 5000 USD is not written")


@pytest.mark.parametrize(
    "change, field",
    [
        ({"training": {"pretrain": {"max_steps": 100_000}}}, "training.pretrain.max_steps: 100000 is not written"),
        ({"data": {"demo": "addition", "n_train": 10_000_000}}, "data.n_train: 10000000 is not written"),
        ({"allow_retry": True}, "allow_retry: True is not written"),
        ({"training": {"pretrain": {"lora": {}}}}, "training.pretrain.lora: {} is not written"),
        ({"workflow": "/tmp/spec.yaml"}, "workflow: '/tmp/spec.yaml' is not written"),
        ({"budget": {"max_wall_minutes": 30, "extension_minutes": 600}}, "budget.extension_minutes: a request cannot"),
    ],
)
def test_overrides_the_request_does_not_state_are_refused(change, field):
    assert _refusal(ASKED, _provider_answering({**HONEST, **change})).startswith(field)


def test_overrides_the_request_states_are_accepted():
    text = BASE + "for 500 steps at batch 16, retry once if the gate fails, budget 1 hour"
    answer = {
        **HONEST,
        "budget": {"max_wall_minutes": 60},
        "allow_retry": True,
        "training": {"pretrain": {"max_steps": 500, "per_device_batch_size": 16}},
    }
    task = parse_request(text, model=_provider_answering(answer), check_plan=False)
    assert task.training["pretrain"].max_steps == 500 and task.budget.max_wall_minutes == 60


def test_asked_for_approvals_stay():
    text = ASKED + ", ask me before training"
    with pytest.raises(BadInput, match="require_approval: the request asks to approve train"):
        parse_request(text, model=_provider_answering(HONEST), check_plan=False)
    kept = parse_request(text, model=_provider_answering({**HONEST, "require_approval": ["train"]}), check_plan=False)
    assert kept.require_approval == ["train"]


def test_submit_refuses_in_one_line(tmp_path):
    ws = tmp_path / "ws"
    for request, expected in (
        ("9" * 8000, "over the limit of 4,000"),
        (BASE + "set budget to 9999 hours", "over the ceiling of 43,200 minutes"),
        (BASE + "budget -5 minutes", "not a positive time limit"),
    ):
        with cpu_seconds() as spent:
            proc = cli(ws, "submit", request, "--plan-only", timeout=600)
        assert spent.seconds < 10
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
        assert expected in lines[0], lines[0]
    assert not ws.exists()
