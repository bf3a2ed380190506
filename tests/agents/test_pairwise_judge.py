"""The pairwise judge over real HTTP: a scripted OpenAI-compatible judge on 127.0.0.1 that answers from the
content of each request (which answer holds a marker, or always "A"), asked in both orders; and off, said so,
when no provider is configured."""

from __future__ import annotations

import json
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest
from local_http import send_json, serving

from trainteam.agents.pairwise_judge import EXAMPLE_CHARS, REFERENCE_LABEL, PairwiseResult, pairwise_judge
from trainteam.core.errors import BadInput

API_KEY = "sk-pairwise-scripted-key-0123456789"
MARK = "GOOD-ANSWER"


def _section(user: str, tag: str) -> str:
    found = re.search(rf"<{tag}>\n(.*?)\n</{tag}>", user, re.S)
    assert found, f"no <{tag}> in the judge's message"
    return found.group(1)


class Judge(BaseHTTPRequestHandler):
    """An OpenAI chat endpoint judging from the request: ``mode`` "marker" prefers the answer holding MARK
    (tie when both or neither do), "A" always answers A. A prompt holding "FAIL" gets HTTP 500, one holding
    "GARBLE" an answer that is not a PairVerdict."""

    mode: ClassVar[str] = "marker"
    requests: ClassVar[list[dict]] = []
    auth: ClassVar[list[str]] = []
    lock: ClassVar[threading.Lock] = threading.Lock()

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with Judge.lock:
            Judge.requests.append(body)
            Judge.auth.append(self.headers.get("Authorization", ""))
            n = len(Judge.requests)
        user = next(m["content"] for m in body["messages"] if m["role"] == "user")
        prompt = _section(user, "prompt")
        if "FAIL" in prompt:
            self.send_response(500)
            self.send_header("retry-after-ms", "1")  # the openai client retries a 500; quickly, here
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        arguments = json.dumps({"better": self._better(user), "reason": "scripted"})
        if "GARBLE" in prompt:
            arguments = json.dumps({"better": "C", "reason": "neither letter"})
        final = next(t["function"]["name"] for t in body["tools"] if t["function"]["name"].startswith("final_result"))
        call = {"id": f"call_{n}", "type": "function", "function": {"name": final, "arguments": arguments}}
        send_json(self, 200, {"id": f"cmpl-{n}", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "finish_reason": "tool_calls",
                                           "message": {"role": "assistant", "content": None, "tool_calls": [call]}}],
                              "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    @staticmethod
    def _better(user: str) -> str:
        if Judge.mode == "A":
            return "A"
        a, b = MARK in _section(user, "answer_A"), MARK in _section(user, "answer_B")
        return "A" if a and not b else "B" if b and not a else "tie"

    def log_message(self, *args):
        pass


@pytest.fixture
def env():
    Judge.mode, Judge.requests, Judge.auth = "marker", [], []
    with serving(Judge) as url:
        yield {"TRAINTEAM_MODEL_EVAL_JUDGE": "openai:scripted-judge", "TRAINTEAM_MODEL_BASE_URL": url,
               "TRAINTEAM_MODEL_API_KEY": API_KEY}


def _users() -> list[str]:
    return [next(m["content"] for m in b["messages"] if m["role"] == "user") for b in Judge.requests]


def _data(k: int, prompt=lambda i: f"Question {i}: what is {i} + {i}?"):
    prompts = [prompt(i) for i in range(k)]
    trained = [f"{2 * i}, because {i} + {i} = {2 * i}. {MARK}" for i in range(k)]
    baseline = [f"maybe {i}" for i in range(k)]
    return prompts, trained, baseline


def test_offline_it_is_off_and_says_so_without_an_agent_or_a_connection(monkeypatch):
    def no_socket(*args, **kwargs):
        raise AssertionError("an offline pairwise judge opened a socket or built an Agent")

    monkeypatch.setattr(socket.socket, "connect", no_socket)
    monkeypatch.setattr("pydantic_ai.Agent.__init__", no_socket)
    prompts, trained, baseline = _data(4)
    for environ in ({}, {"TRAINTEAM_MODEL": "offline", "TRAINTEAM_MODEL_BASE_URL": "http://127.0.0.1:9/v1"}):
        result = pairwise_judge(prompts, trained, baseline, environ=environ)
        assert result == PairwiseResult(ran=False, note=result.note)
        assert result.note.startswith("pairwise judge: off (no provider configured for eval_judge")
        assert "offline runs judge by metrics only" in result.note and result.line() == result.note
        assert result.win_rate is None and result.by is None


def test_a_judge_preferring_the_trained_answer_wins_every_prompt_in_both_orders(env):
    prompts, trained, baseline = _data(7)
    trained[0] += " and more" * 100  # a long answer: the example keeps a cut of it
    result = pairwise_judge(prompts, trained, baseline, n=5, environ=env)
    assert (result.ran, result.by, result.n) == (True, "openai:scripted-judge", 5)
    assert (result.wins, result.losses, result.ties, result.split, result.unanswered) == (5, 0, 0, 0, 0)
    assert result.win_rate == 1.0
    assert result.line() == ("pairwise (model openai:scripted-judge, 5 prompts, both orders): trained better 5, "
                             "input better 0, tie 0, orders disagree 0 → win rate 1.00")
    assert "compared the trained and the input model's answers on 5 held-out prompts" in result.note
    users = _users()
    assert len(users) == 10 and all(b["model"] == "scripted-judge" for b in Judge.requests)
    # deterministic order: each prompt twice, trained's answer first as A, then as B
    assert [_section(u, "prompt") for u in users] == [p for p in prompts[:5] for _ in (0, 1)]
    assert [MARK in _section(u, "answer_A") for u in users] == [True, False] * 5
    assert "Question 5" not in json.dumps(Judge.requests)  # n bounds what is asked
    system = next(m["content"] for m in Judge.requests[0]["messages"] if m["role"] in ("system", "developer"))
    assert "eval_judge" in system and "only a judgement that holds in both orders counts" in system
    first = result.examples[0]
    assert first.outcome == "win" and len(first.trained) <= EXAMPLE_CHARS and first.trained.endswith("…")
    assert [(o.a, o.better) for o in first.orders] == [("trained", "trained"), ("input", "trained")]
    assert len(result.examples) == 3


def test_a_position_biased_judge_wins_nothing(env):
    Judge.mode = "A"
    prompts, trained, baseline = _data(6)
    result = pairwise_judge(prompts, trained, baseline, n=6, environ=env)
    assert (result.n, result.wins, result.losses, result.ties, result.split) == (6, 0, 0, 0, 6)
    assert result.win_rate == 0.0 and result.unanswered == 0
    assert [(o.a, o.better) for o in result.examples[0].orders] == [("trained", "trained"), ("input", "input")]
    assert result.examples[0].outcome == "split"
    assert result.line().endswith("orders disagree 6 → win rate 0.00")


def test_losses_and_ties_count_when_both_orders_agree(env):
    prompts, trained, baseline = _data(3)
    trained[1], baseline[1] = baseline[1], trained[1]  # the input model's answer holds the marker
    baseline[2] = trained[2]  # both do
    result = pairwise_judge(prompts, trained, baseline, environ=env)
    assert (result.n, result.wins, result.losses, result.ties, result.split) == (3, 1, 1, 1, 0)
    assert [e.outcome for e in result.examples] == ["win", "loss", "tie"]
    assert result.win_rate == pytest.approx(1 / 3)


def test_no_secret_reaches_the_judge_beyond_the_authorization_header(env):
    prompts, trained, baseline = _data(2, prompt=lambda i: f"Question {i}: use api_key={API_KEY} and say {i}")
    trained[0] += f" my key is {API_KEY}"
    references = [f"{2 * i} (TRAINTEAM_MODEL_API_KEY={API_KEY})" for i in range(2)]
    result = pairwise_judge(prompts, trained, baseline, references, environ={**env, "OTHER_TOKEN": "tok-0123456789"})
    assert result.ran and result.n == 2
    assert Judge.auth and set(Judge.auth) == {f"Bearer {API_KEY}"}
    sent = json.dumps(Judge.requests)
    assert API_KEY not in sent and "tok-0123456789" not in sent and "[REDACTED]" in sent
    user = _users()[0]
    assert f"{REFERENCE_LABEL[0].upper()}{REFERENCE_LABEL[1:]}:\n<reference>\n0 (" in user
    assert API_KEY not in result.model_dump_json()


def test_a_server_error_on_some_prompts_counts_them_as_split_and_notes_it_once(env):
    prompts, trained, baseline = _data(5, prompt=lambda i: f"Question {i}" + (" FAIL" if i in (1, 3) else ""))
    result = pairwise_judge(prompts, trained, baseline, environ=env)
    assert (result.n, result.wins, result.split, result.unanswered) == (5, 3, 2, 2)
    assert result.win_rate == pytest.approx(0.6)
    assert result.note.count("HTTP 500 (internal server error)") == 1 and "\n" not in result.note
    assert "2 without a valid verdict, counted as split" in result.note
    assert "eval_judge: openai:scripted-judge at http://127.0.0.1:" in result.note and API_KEY not in result.note
    failed = result.examples[1]
    assert failed.outcome == "split" and [(o.a, o.better) for o in failed.orders] == [("trained", None)]
    assert "HTTP 500" in failed.orders[0].reason
    assert result.line().endswith("orders disagree 2 (2 without a valid verdict) → win rate 0.60")


def test_an_answer_that_is_not_a_verdict_is_split_after_one_retry(env):
    prompts, trained, baseline = _data(2, prompt=lambda i: f"Question {i}" + (" GARBLE" if i == 0 else ""))
    result = pairwise_judge(prompts, trained, baseline, environ=env)
    assert (result.wins, result.split, result.unanswered) == (1, 1, 1)
    assert "not a valid PairVerdict (better:" in result.note
    assert len(Judge.requests) == 2 + 2  # the garbled prompt: its answer and one retry; the other: both orders


def test_a_provider_down_is_not_asked_past_three_prompts_in_a_row(env):
    prompts, trained, baseline = _data(6, prompt=lambda i: f"Question {i} FAIL")
    result = pairwise_judge(prompts, trained, baseline, environ=env)
    assert (result.ran, result.n, result.split, result.unanswered, result.wins) == (True, 6, 6, 6, 0)
    asked = {_section(u, "prompt") for u in _users()}
    assert asked == set(prompts[:3])
    assert "3 without a valid verdict" in result.note and "3 not asked, counted as split" in result.note


def test_a_setting_that_cannot_work_or_inputs_that_do_not_line_up_raise_bad_input(env):
    prompts, trained, baseline = _data(3)
    with pytest.raises(BadInput, match="one answer per prompt"):
        pairwise_judge(prompts, trained[:2], baseline, environ=env)
    with pytest.raises(BadInput, match="one answer per prompt"):
        pairwise_judge(prompts, trained, baseline, ["r"], environ={})
    for n in (0, 201):
        with pytest.raises(BadInput, match=r"n must be 1\.\.200"):
            pairwise_judge(prompts, trained, baseline, n=n, environ={})
    with pytest.raises(BadInput):
        pairwise_judge(prompts, trained, baseline, environ={"TRAINTEAM_MODEL_EVAL_JUDGE": "nosuchprovider:x"})
    with pytest.raises(BadInput):
        pairwise_judge(prompts, trained, baseline, environ={"TRAINTEAM_MODEL_EVAL_JUDGE": "not-a-model-id"})
    assert not Judge.requests


def test_asked_from_inside_a_persona_tool_it_still_reaches_the_judge(env):
    """A step tool runs inside the persona's own Agent run, where pydantic-ai refuses a nested run_sync: the
    comparison runs in a thread of its own."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def persona(messages, info):
        return ModelResponse(parts=[ToolCallPart("step", {})] if len(messages) == 1 else [TextPart("done")])

    agent = Agent(FunctionModel(persona))
    seen: list[PairwiseResult] = []

    @agent.tool_plain
    def step() -> str:
        seen.append(pairwise_judge(*_data(2), environ=env))
        return "ok"

    agent.run_sync("go")
    assert [(r.ran, r.wins, r.n) for r in seen] == [(True, 2, 2)]
