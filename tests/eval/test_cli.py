"""`trainteam models ...` and `trainteam serve` as a person runs them: real subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainteam.agents.registry import ModelRegistry
from trainteam.workspace import Workspace

CLI = [sys.executable, "-m", "trainteam.cli"]


def tt(ws: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "-w", str(ws), *args], capture_output=True, text=True, timeout=120)


@pytest.fixture()
def registered(tmp_path, tiny_checkpoint):
    ws = tmp_path / "ws"
    rec = ModelRegistry.of(Workspace.open(ws)).register_checkpoint(
        tiny_checkpoint, stage="sft", name="adder", metrics={"exact_match": 0.25})
    return ws, rec


def test_models_list_show_bind_unbind(registered):
    ws, rec = registered
    listed = json.loads(tt(ws, "models", "list", "--json").stdout)
    assert [(m["id"], m["name"], m["metrics"]) for m in listed] == [(rec.id, "adder", {"exact_match": 0.25})]
    bound = tt(ws, "models", "bind", "chat", "adder", "--json")
    assert bound.returncode == 0 and json.loads(bound.stdout) == {"role": "chat", "model": rec.id}
    shown = json.loads(tt(ws, "models", "show", rec.id[:8], "--json").stdout)
    assert shown["roles"] == ["chat"] and shown["path"] == rec.path
    assert "chat" in tt(ws, "models", "list").stdout
    assert json.loads(tt(ws, "models", "unbind", "chat", "--json").stdout) == {"role": "chat", "was": rec.id}
    assert ModelRegistry.of(Workspace.open(ws)).roles() == {}


def test_unknown_model_is_one_line_exit_2(registered):
    ws, _ = registered
    for args in (("models", "bind", "chat", "nope"), ("serve", "role:chat", "--port", "0")):
        r = tt(ws, *args)
        assert r.returncode == 2, args
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("error:"), r.stderr


@pytest.mark.slow
def test_serve_command_answers_over_http(registered):
    """`trainteam serve role:chat` in its own process, queried with the openai client."""
    from openai import OpenAI

    ws, rec = registered
    tt(ws, "models", "bind", "chat", rec.id)
    env = dict(os.environ, TRAINTEAM_SERVE_API_KEY="k1")
    proc = subprocess.Popen([*CLI, "-w", str(ws), "serve", "role:chat", "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line)
        assert url, f"no URL in {line!r}"
        client = OpenAI(base_url=url.group(1), api_key="k1", max_retries=0, timeout=30)
        assert [m.id for m in client.models.list().data] == [rec.id]
        resp = client.chat.completions.create(model=rec.id, messages=[{"role": "user", "content": "3+4="}],
                                              temperature=0, max_tokens=4)
        assert re.fullmatch(r"\d+", resp.choices[0].message.content)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
