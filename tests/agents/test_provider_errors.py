"""A provider that fails is one line — persona, model, URL, what happened — never its request, its
body or the key it echoes; a persona's step fails with that line, a request is refused with it."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

import pytest
from local_http import send_json, serving
from persona_helpers import ctx

from trainteam.agents.providers import ModelChoice, public_url
from trainteam.agents.runtime import run_persona_step
from trainteam.core.errors import BadInput
from trainteam.workflows.requests.submission import parse_request
from trainteam.workspace import Workspace

KEY = "sk-echoed-0123456789abcdef"


class Failing(BaseHTTPRequestHandler):
    """Answers every chat request with ``status`` and a body that echoes the key and the request."""

    status = 401

    def do_POST(self):  # noqa: N802 (http.server's name)
        sent = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode(errors="replace")
        send_json(
            self,
            Failing.status,
            {
                "error": {
                    "message": f"bad key {self.headers.get('Authorization')}: {sent[:500]}",
                    "code": "invalid_api_key",
                }
            },
        )

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    with serving(Failing) as url:
        yield url


@pytest.mark.parametrize(
    "status,what",
    [
        (401, "HTTP 401 (unauthorized)"),
        (403, "HTTP 403 (forbidden)"),
        (404, "HTTP 404 (not found)"),
        (503, "HTTP 503 (service unavailable)"),
    ],
)
def test_a_persona_step_on_a_failing_provider_fails_with_one_line(tmp_path, server, monkeypatch, status, what):
    Failing.status = status
    monkeypatch.setenv("TRAINTEAM_MODEL_EVAL_JUDGE", "openai:gpt-x")
    monkeypatch.setenv("TRAINTEAM_MODEL_BASE_URL_EVAL_JUDGE", server)
    monkeypatch.setenv("TRAINTEAM_MODEL_API_KEY", KEY)
    ws = Workspace.open(tmp_path / "ws")
    result = run_persona_step(ctx(ws, "eval_judge", "gate"), "gate")
    assert (result.outcome, result.summary) == ("error", f"eval_judge: openai:gpt-x at {server}: {what}")
    transcript = (ws.dir("transcripts") / "run1" / "gate#1.json").read_text()
    assert json.loads(transcript)["error"] == result.summary and KEY not in transcript


def test_a_request_on_an_unreachable_provider_is_refused_with_one_line(monkeypatch):
    monkeypatch.setenv("TRAINTEAM_MODEL_ML_ORCHESTRATOR", "openai:x")
    monkeypatch.setenv("TRAINTEAM_MODEL_BASE_URL", "http://127.0.0.1:1/v1")
    with pytest.raises(BadInput) as refused:
        parse_request("pretrain a tiny llama on the addition demo, budget 5 minutes")
    assert (
        str(refused.value) == "ml_orchestrator: openai:x at http://127.0.0.1:1/v1: cannot connect (connection refused)"
    )


def test_a_base_url_is_printed_without_its_credentials():
    assert public_url("https://alice:s3cret-pass@llm.example.com/v1/") == "https://llm.example.com/v1"
    assert ModelChoice("eval_judge", "openai:x", "http://u:p@h:8000/v1").describe() == "openai:x @ http://h:8000/v1"
