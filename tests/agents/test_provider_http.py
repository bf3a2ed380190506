"""A persona on a real provider: OpenAIChatModel over real HTTP to a scripted OpenAI-compatible server."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest
from local_http import send_json, serving
from persona_helpers import ctx

from trainteam.agents.providers import choose_model
from trainteam.agents.runtime import run_persona_step
from trainteam.core.errors import BadInput
from trainteam.workflows.requests.submission import parse_request
from trainteam.workspace import Workspace

API_KEY = "sk-scripted-server-key-000111222"


class Script(BaseHTTPRequestHandler):
    """Answers like an OpenAI chat endpoint: first call the step tool, then the final report."""

    requests: list[dict] = []
    auth: list[str] = []
    task: dict | None = None

    def do_POST(self):  # noqa: N802 (http.server's name)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Script.requests.append(body)
        Script.auth.append(self.headers.get("Authorization", ""))
        tools = {t["function"]["name"] for t in body.get("tools", [])}
        answered = any(m.get("role") == "tool" for m in body["messages"])
        if Script.task is not None:  # the orchestrator's request parsing: the task as structured output
            call = {"name": next(n for n in tools if "TrainTask" in n), "arguments": json.dumps(Script.task)}
        elif not answered:
            call = {"name": "prepare_corpus", "arguments": json.dumps({"reason": "bring the data in"})}
        else:
            final = next(n for n in tools if n.startswith("final_result"))
            call = {"name": final, "arguments": json.dumps({"summary": "corpus ready", "decision": "proceed"})}
        reply = {
            "id": f"cmpl-{len(Script.requests)}",
            "object": "chat.completion",
            "created": 0,
            "model": body["model"],
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "tool_calls",
                    "message": {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [{"id": f"call_{len(Script.requests)}", "type": "function", "function": call}],
                    },
                }
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
        send_json(self, 200, reply)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Script.requests, Script.auth, Script.task = [], [], None
    with serving(Script) as url:
        yield url


def test_persona_runs_on_an_openai_compatible_server_chosen_by_settings(tmp_path, server, monkeypatch):
    monkeypatch.setenv("TRAINTEAM_MODEL_DATA_CURATOR", "openai:scripted-curator")
    monkeypatch.setenv("TRAINTEAM_MODEL_BASE_URL", server)
    monkeypatch.setenv("TRAINTEAM_MODEL_API_KEY", API_KEY)
    ws = Workspace.open(tmp_path / "ws")
    result = run_persona_step(ctx(ws, "data_curator", "prepare_corpus"), "prepare_corpus")
    assert result.outcome == "ok" and result.metrics["n_train"] == 300
    assert result.details["persona"]["summary"] == "corpus ready"
    assert result.details["persona"]["model"] == f"openai:scripted-curator @ {server}"
    assert len(Script.requests) == 2 and Script.requests[0]["model"] == "scripted-curator"
    offered = {t["function"]["name"] for t in Script.requests[0]["tools"]}
    assert {"prepare_corpus", "curate"} <= offered and not offered & {"train", "register_model", "gate"}
    system = next(m["content"] for m in Script.requests[0]["messages"] if m["role"] in ("system", "developer"))
    assert "data_curator" in system and "### curation" in system
    assert Script.auth == [f"Bearer {API_KEY}"] * 2  # the key went to the server, from the environment...
    transcript = (ws.dir("transcripts") / "run1" / "prepare_corpus#1.json").read_text()
    assert API_KEY not in transcript and '"model": "openai:scripted-curator @' in transcript  # ...and nowhere else


def test_other_personas_stay_offline_and_bad_settings_fail_clearly(monkeypatch):
    monkeypatch.setenv("TRAINTEAM_MODEL_DATA_CURATOR", "openai:x")
    assert choose_model("data_curator").model == "openai:x"
    assert choose_model("eval_judge").offline
    monkeypatch.setenv("TRAINTEAM_MODEL", "gpt-4o")
    with pytest.raises(BadInput, match="TRAINTEAM_MODEL: 'gpt-4o' is not a model id"):
        choose_model("eval_judge")


def test_a_real_provider_parses_requests_as_structured_output_and_is_held_to_the_text(server, monkeypatch):
    monkeypatch.setenv("TRAINTEAM_MODEL_ML_ORCHESTRATOR", "openai:scripted-orchestrator")
    monkeypatch.setenv("TRAINTEAM_MODEL_BASE_URL_ML_ORCHESTRATOR", server)
    Script.task = {
        "name": "sums",
        "model": {"arch": "llama", "hidden_size": 64, "num_layers": 2, "num_heads": 2},
        "data": {"demo": "addition", "n_train": 1000},
        "budget": {"max_wall_minutes": 15},
        "stages": ["pretrain"],
    }
    task = parse_request("pretrain a small llama to add numbers, 1000 problems, budget 15 minutes")
    assert (task.name, task.model.hidden_size, task.data.n_train, task.budget.max_wall_minutes) == (
        "sums",
        64,
        1000,
        15,
    )
    offered = {t["function"]["name"] for t in Script.requests[0]["tools"]}
    assert any("TrainTask" in n for n in offered) and any("Refusal" in n for n in offered)
    Script.task = {**Script.task, "data": {"path": "/data/train.jsonl", "eval_path": "/data/eval.jsonl"}}
    with pytest.raises(BadInput, match="data.path: /data/train.jsonl is not written in the request"):
        parse_request("pretrain a small llama on my data, budget 15 minutes")


@pytest.mark.parametrize(
    "setting,needle", [("nosuch:x", "Unknown model: nosuch:x"), ("openai:gpt-x", "OPENAI_API_KEY")]
)
def test_a_model_setting_that_cannot_work_is_one_line_naming_it(tmp_path, monkeypatch, setting, needle):
    monkeypatch.setenv("TRAINTEAM_MODEL", setting)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("TRAINTEAM_MODEL_API_KEY", raising=False)
    ws = Workspace.open(tmp_path / "ws")
    with pytest.raises(BadInput) as err:
        run_persona_step(ctx(ws, "eval_judge", "gate"), "gate")
    assert str(err.value).startswith(f"TRAINTEAM_MODEL: {setting}: ") and needle in str(err.value)
    assert "\n" not in str(err.value)
