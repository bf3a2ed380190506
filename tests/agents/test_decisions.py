"""A decision taken by a real model over real HTTP (a scripted OpenAI-compatible server on 127.0.0.1),
bounded by the caller's rules, and the offline policy's decision whenever the answer cannot be used."""

from __future__ import annotations

import json
import logging
import socket
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest
from local_http import send_json, serving
from pydantic import BaseModel, Field

from trainteam.agents.decisions import Decided, decide

API_KEY = "sk-decisions-scripted-key-0123456789"


class Recipe(BaseModel):
    learning_rate: float = Field(gt=0, description="peak learning rate")
    max_steps: int = Field(gt=0)


OFFLINE = Recipe(learning_rate=1e-3, max_steps=200)
EVIDENCE = {
    "probes": [{"learning_rate": 1e-3, "heldout_loss": 1.9}, {"learning_rate": 3e-4, "heldout_loss": 1.4}],
    "budget_s": 600,
    "env": {"TRAINTEAM_MODEL_API_KEY": API_KEY},
    "note": f"api_key={API_KEY}",
}


class Script(BaseHTTPRequestHandler):
    """An OpenAI chat endpoint that answers the structured output as a tool call with ``Script.arguments``
    (a JSON string, valid or not), or fails with ``Script.status``."""

    requests: ClassVar[list[dict]] = []
    arguments: str = "{}"
    status: int = 200

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Script.requests.append(body)
        if Script.status != 200:
            self.send_response(Script.status)
            self.send_header("retry-after-ms", "1")  # the openai client retries a 500; quickly, here
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        final = next(t["function"]["name"] for t in body["tools"] if t["function"]["name"].startswith("final_result"))
        call = {
            "id": f"call_{len(Script.requests)}",
            "type": "function",
            "function": {"name": final, "arguments": Script.arguments},
        }
        send_json(
            self,
            200,
            {
                "id": f"cmpl-{len(Script.requests)}",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "tool_calls",
                        "message": {"role": "assistant", "content": None, "tool_calls": [call]},
                    }
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            },
        )

    def log_message(self, *args):
        pass


@pytest.fixture
def env():
    Script.requests, Script.arguments, Script.status = [], "{}", 200
    with serving(Script) as url:
        yield {
            "TRAINTEAM_MODEL_TRAINING_ENGINEER": "openai:scripted-engineer",
            "TRAINTEAM_MODEL_BASE_URL": url,
            "TRAINTEAM_MODEL_API_KEY": API_KEY,
        }


def _decide(env, check=None) -> Decided[Recipe]:
    return decide(
        "training_engineer",
        "Which recipe should the sft stage train with?",
        EVIDENCE,
        OFFLINE,
        check=check,
        environ=env,
    )


def test_the_models_different_valid_choice_is_the_decision_and_no_secret_reaches_it(env):
    Script.arguments = json.dumps({"learning_rate": 3e-4, "max_steps": 150})
    decided = _decide(env, check=lambda r: None if r.max_steps <= 200 else "over budget")
    assert decided == Decided(Recipe(learning_rate=3e-4, max_steps=150), "openai:scripted-engineer", None)
    assert len(Script.requests) == 1 and Script.requests[0]["model"] == "scripted-engineer"
    sent = json.dumps(Script.requests)
    assert API_KEY not in sent  # neither the environment dump nor the `api_key=` note in the evidence
    user = next(m["content"] for m in Script.requests[0]["messages"] if m["role"] == "user")
    assert "Which recipe should the sft stage train with?" in user and '"heldout_loss": 1.4' in user
    assert '"max_steps": 200' in user  # the offline proposal, shown as the default
    system = next(m["content"] for m in Script.requests[0]["messages"] if m["role"] in ("system", "developer"))
    assert "training_engineer" in system and "refused and the default is used" in system


def test_malformed_json_falls_back_to_the_offline_decision_with_a_warning(env, caplog):
    Script.arguments = '{"learning_rate": 3e-4, "max_steps": '  # cut off mid-answer
    with caplog.at_level(logging.WARNING, logger="trainteam.decisions"):
        decided = _decide(env)
    assert decided.value == OFFLINE and decided.by == "offline"
    assert decided.warning.startswith("training_engineer: openai:scripted-engineer at http://127.0.0.1:")
    assert "kept the offline policy's decision" in decided.warning and "\n" not in decided.warning
    assert len(Script.requests) == 2  # one retry after the malformed answer, then the offline policy
    assert [r.getMessage() for r in caplog.records if r.name == "trainteam.decisions"] == [decided.warning]


def test_a_schema_invalid_answer_names_the_field(env):
    Script.arguments = json.dumps({"learning_rate": -1.0, "max_steps": 100})
    decided = _decide(env)
    assert decided.value == OFFLINE and "learning_rate" in decided.warning


def test_an_answer_the_rules_refuse_falls_back_and_says_which_rule(env):
    Script.arguments = json.dumps({"learning_rate": 3e-4, "max_steps": 5000})
    seen: list[Recipe] = []

    def within_budget(r: Recipe) -> str | None:
        seen.append(r)
        return None if r.max_steps <= 200 else f"max_steps {r.max_steps} exceeds the budget's 200 steps"

    decided = _decide(env, check=within_budget)
    assert decided.value == OFFLINE and decided.by == "offline"
    assert "answer refused: max_steps 5000 exceeds the budget's 200 steps" in decided.warning
    assert len(seen) == 2 and len(Script.requests) == 2
    retry = [m for m in Script.requests[1]["messages"] if m["role"] == "tool"]
    assert retry and "exceeds the budget" in retry[-1]["content"]  # the model was told why, once


def test_a_provider_error_falls_back_with_a_one_line_warning(env):
    Script.status = 500
    decided = _decide(env)
    assert decided.value == OFFLINE and decided.by == "offline"
    assert "HTTP 500 (internal server error)" in decided.warning and API_KEY not in decided.warning


def test_offline_decides_at_once_without_a_connection(monkeypatch):
    def no_socket(*args, **kwargs):
        raise AssertionError("offline decision opened a socket")

    monkeypatch.setattr(socket.socket, "connect", no_socket)
    monkeypatch.setattr("pydantic_ai.Agent.__init__", no_socket)
    for environ in ({}, {"TRAINTEAM_MODEL": "offline", "TRAINTEAM_MODEL_BASE_URL": "http://127.0.0.1:9/v1"}):
        assert decide("eval_judge", "Retry?", {"x": 1}, OFFLINE, environ=environ) == Decided(OFFLINE, "offline")


def test_a_decision_asked_from_inside_a_persona_tool_reaches_the_model(env):
    """Every caller asks from a step tool, inside the persona's own Agent run, where pydantic-ai refuses a
    nested run_sync: the decision runs in a thread of its own and still gets the model's answer."""
    from pydantic_ai import Agent
    from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
    from pydantic_ai.models.function import FunctionModel

    def persona(messages, info):
        return ModelResponse(parts=[ToolCallPart("step", {})] if len(messages) == 1 else [TextPart("done")])

    Script.arguments = json.dumps({"learning_rate": 3e-4, "max_steps": 150})
    agent = Agent(FunctionModel(persona))
    seen = []

    @agent.tool_plain
    def step() -> str:
        seen.append(_decide(env))
        return "ok"

    agent.run_sync("go")
    assert seen == [Decided(Recipe(learning_rate=3e-4, max_steps=150), "openai:scripted-engineer", None)]
