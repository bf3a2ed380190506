"""No secret is stored or printed: keys in a task's description, and keys a provider echoes back in its
error, appear nowhere — not in the CLI's output, not in any byte under the workspace (trainteam.db,
dbos.sqlite and its WAL, whose pickles DBOS writes base64-encoded, reports, transcripts), not in the
JSON the read commands print. A provider that fails is one line naming the persona, model and URL.

Everything real: an OpenAI-compatible HTTP server on 127.0.0.1 that answers 401 and echoes the
bearer key and the request, and the CLI in subprocesses.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
import yaml
from local_http import send_json, serving
from spine_helpers import DATA, TINY_TASK, cli

RANDOM = secrets.token_hex(12)
API_KEY = f"sk-test-{RANDOM}"  # the provider key, given in the environment and echoed by the server
TASK_KEYS = {  # keys a person pasted into prose; the needle is what must not survive (no fragment either)
    "sk": f"sk-proj-{secrets.token_hex(12)}",
    "hf": f"hf_{secrets.token_hex(12)}",
    "api_key": f"q{secrets.token_hex(12)}",
}
DESCRIPTION = (
    f"addition; my openai key is {TASK_KEYS['sk']}, the hub token {TASK_KEYS['hf']} "
    f"and the tracker's api_key={TASK_KEYS['api_key']} (do not lose them)"
)
NEEDLES = [RANDOM, *(re.sub(r"^(sk-proj-|hf_)", "", k) for k in TASK_KEYS.values())]
_B64_RUN = re.compile(rb"[A-Za-z0-9+/]{24,}={0,2}")


class Unauthorized(BaseHTTPRequestHandler):
    """An OpenAI-compatible endpoint that refuses every key and echoes it, and the request, back."""

    def do_POST(self):  # noqa: N802 (http.server's name)
        sent = self.rfile.read(int(self.headers.get("Content-Length") or 0)).decode(errors="replace")
        auth = self.headers.get("Authorization", "")
        body = {
            "error": {
                "message": f"Incorrect API key provided: {auth.removeprefix('Bearer ')}. "
                f"Authorization: {auth}; request was: {sent[:4000]}",
                "type": "invalid_request_error",
                "param": None,
                "code": "invalid_api_key",
            }
        }
        send_json(self, 401, body)

    def log_message(self, *args):
        pass


@pytest.fixture
def provider() -> Iterator[str]:
    with serving(Unauthorized) as url:
        yield url


def _decoded(blob: bytes) -> Iterator[bytes]:
    """The bytes themselves, and every base64 run in them decoded at each alignment (DBOS stores
    its pickled inputs, outputs and errors as base64 text: a key inside would not show as itself)."""
    yield blob
    for run in _B64_RUN.findall(blob):
        for start in range(4):
            chunk = run[start:]
            chunk = chunk[: len(chunk) - len(chunk) % 4]
            try:
                yield base64.b64decode(chunk, validate=True)
            except (binascii.Error, ValueError):
                continue


def occurrences(texts: dict[str, bytes | str]) -> dict[str, int]:
    """Where any needle occurs: {place: count}."""
    found = {}
    for place, text in texts.items():
        blob = text.encode() if isinstance(text, str) else text
        n = sum(part.count(needle.encode()) for part in _decoded(blob) for needle in NEEDLES)
        if n:
            found[place] = n
    return found


def workspace_bytes(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _outputs(name: str, proc) -> dict[str, str]:
    return {f"{name} stdout": proc.stdout, f"{name} stderr": proc.stderr}


def _provider_env(server: str, persona: str) -> dict[str, str]:
    return {
        f"TRAINTEAM_MODEL_{persona.upper()}": "openai:gpt-x",
        "TRAINTEAM_MODEL_BASE_URL": server,
        "TRAINTEAM_MODEL_API_KEY": API_KEY,
    }


def test_a_run_on_a_provider_that_echoes_the_key_stores_and_prints_no_key(tmp_path, ws, provider):
    task = tmp_path / "task.yaml"
    task.write_text(yaml.safe_dump({**TINY_TASK, "workflow": "prep_only", "description": DESCRIPTION}))
    env = _provider_env(provider, "data_curator")
    run = cli(
        ws, "execute-workflow", str(DATA / "prep_only.yaml"), "--task", str(task), "--run-id", "r-secret", env=env
    )
    assert run.returncode == 1, run.stderr
    line = f"data_curator: openai:gpt-x at {provider}: HTTP 401 (unauthorized)"
    assert line in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.splitlines()) <= 6, run.stderr  # the run line, the step, its failure, the run's end
    shown = json.loads(cli(ws, "runs", "show", "r-secret", "--json", check=True).stdout)
    assert shown["status"] == "failed" and line in shown["error"]
    assert "[REDACTED]" in shown["task"]["description"]  # it was there, and it was masked
    printed = {**_outputs("execute-workflow", run)}
    for args in (
        ("runs", "list", "--json"),
        ("runs", "show", "r-secret", "--json"),
        ("runs", "report", "r-secret"),
        ("replay", "r-secret"),
        ("graph", "export", "--format", "json", "--out", str(tmp_path / "g.json")),
    ):
        printed.update(_outputs(" ".join(args[:2]), cli(ws, *args, check=True)))
    assert occurrences({**printed, **workspace_bytes(ws), "g.json": (tmp_path / "g.json").read_bytes()}) == {}


def test_a_request_on_a_provider_that_echoes_the_key_is_one_line_and_writes_nothing(ws, provider):
    request = f"pretrain a tiny llama on the addition demo, budget 5 minutes, key {TASK_KEYS['sk']}"
    proc = cli(ws, "submit", request, "--yes", env=_provider_env(provider, "ml_orchestrator"))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"error: ml_orchestrator: openai:gpt-x at {provider}: HTTP 401 (unauthorized)"
    assert occurrences(_outputs("submit", proc)) == {} and not ws.exists()


def test_an_unreachable_model_base_url_is_one_line_and_writes_nothing(ws):
    proc = cli(
        ws,
        "submit",
        "pretrain a tiny llama on the addition demo, budget 5 minutes",
        env={"TRAINTEAM_MODEL": "openai:x", "TRAINTEAM_MODEL_BASE_URL": "http://127.0.0.1:1/v1"},
    )
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == (
        "error: ml_orchestrator: openai:x at http://127.0.0.1:1/v1: cannot connect (connection refused)"
    ), proc.stderr
    assert proc.stdout == "" and not ws.exists()
