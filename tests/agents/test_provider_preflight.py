"""A persona's provider that does not answer is refused at the door: before a run is stored, one line naming the
setting, the model, the URL and what happened, exit 2 (issue: an unreachable provider was found only at the first
persona step, after the run was created and had trained). A real HTTP server on 127.0.0.1 answers the probe; the
probe never carries the key."""

from __future__ import annotations

import socket
import threading
from http.server import BaseHTTPRequestHandler

import pytest
import yaml
from local_http import send_json, serving
from spine_helpers import TINY_TASK, cli

from trainteam.agents.providers import ModelChoice, check_answers
from trainteam.core.errors import BadInput

KEY = "sk-probe-never-sends-me-0123456789"


class Models(BaseHTTPRequestHandler):
    """An OpenAI-compatible server: lists its models; records what the probe sent."""

    seen: list[dict] = []
    status = 200

    def do_GET(self):  # noqa: N802
        Models.seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
        send_json(self, Models.status, {"object": "list", "data": [{"id": "x", "object": "model"}]})

    def log_message(self, *args):
        pass


@pytest.fixture
def models():
    Models.seen, Models.status = [], 200
    with serving(Models) as url:
        yield url


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _task(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump(TINY_TASK))
    return path


@pytest.mark.parametrize("command", ["validate", "execute"])
def test_a_persona_url_nothing_listens_on_is_refused_before_the_run_is_stored(tmp_path, command):
    url = f"http://127.0.0.1:{_free_port()}/v1"
    env = {"TRAINTEAM_MODEL_EVAL_JUDGE": "openai:judge", "TRAINTEAM_MODEL_BASE_URL_EVAL_JUDGE": url,
           "TRAINTEAM_MODEL_API_KEY": KEY}
    ws, task = tmp_path / "ws", _task(tmp_path)
    args = ["validate", str(task)]
    if command == "execute":
        args = ["execute-workflow", "train_model", "--task", str(task)]
    proc = cli(ws, *args, env=env, timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert lines[-1] == (f"error: TRAINTEAM_MODEL_EVAL_JUDGE: openai:judge at {url}: cannot connect (connection "
                         "refused); nothing answers there (start the server, or fix "
                         "TRAINTEAM_MODEL_BASE_URL_EVAL_JUDGE)")
    assert KEY not in proc.stderr + proc.stdout
    assert not ws.exists()  # no run stored, no workspace made


def test_a_server_that_answers_passes_and_the_probe_carries_no_key(tmp_path, models):
    env = {"TRAINTEAM_MODEL": "openai:x", "TRAINTEAM_MODEL_BASE_URL": models, "TRAINTEAM_MODEL_API_KEY": KEY}
    proc = cli(tmp_path / "ws", "validate", str(_task(tmp_path)), env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert Models.seen == [{"path": "/v1/models", "auth": None}]  # four personas, one endpoint: probed once


@pytest.mark.parametrize("status", [401, 403, 500, 503])
def test_any_answer_but_a_missing_api_counts(models, status):
    Models.status = status  # the key or the server's state is the provider's to report on the real request
    check_answers(ModelChoice("eval_judge", "openai:x", models, "TRAINTEAM_MODEL"), None)
    assert len(Models.seen) == 1


def test_a_base_url_without_an_api_is_refused_naming_the_likely_fix(models, monkeypatch):
    Models.status = 404
    monkeypatch.setenv("TRAINTEAM_MODEL_BASE_URL", models[:-3])
    with pytest.raises(BadInput, match=r"^TRAINTEAM_MODEL: openai:x at http://127\.0\.0\.1:\d+: HTTP 404 \(not "
                                       r"found\) for GET /models: not an OpenAI-compatible API's base URL \(it often "
                                       r"ends in /v1\) \(fix TRAINTEAM_MODEL_BASE_URL\)$"):
        check_answers(ModelChoice("eval_judge", "openai:x", models[:-3], "TRAINTEAM_MODEL"), None)


def test_a_server_that_never_answers_is_refused_within_the_probe_time(monkeypatch):
    from trainteam.agents import providers

    monkeypatch.setattr(providers, "PROBE_TIMEOUT_S", 0.5)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts the connection, never answers
    done = threading.Event()
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        with pytest.raises(BadInput, match=r"at http://127\.0\.0\.1:\d+/v1: (timed out|no answer within)"):
            check_answers(ModelChoice("data_curator", "openai:x", url, "TRAINTEAM_MODEL"), None)
        done.set()
    finally:
        silent.close()
    assert done.is_set()


def test_a_hosted_provider_is_probed_at_its_own_url(monkeypatch, models):
    """Without a base URL the model's own (pydantic-ai's ``base_url``) is probed; a 404 there is an answer."""
    Models.status = 404

    class Hosted:
        base_url = models

    check_answers(ModelChoice("eval_judge", "openai:x", None, "TRAINTEAM_MODEL"), Hosted())
    assert Models.seen == [{"path": "/v1/models", "auth": None}]
