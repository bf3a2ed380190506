"""`trainteam models ...` and `trainteam serve` as a person runs them: real subprocesses."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from trainteam.trainers.serving.registry import ModelRegistry
from trainteam.workspace import Workspace

CLI = [sys.executable, "-m", "trainteam.cli"]


def tt(ws: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, "-w", str(ws), *args], capture_output=True, text=True, timeout=600)


@pytest.fixture()
def registered(tmp_path, tiny_checkpoint):
    ws = tmp_path / "ws"
    rec = ModelRegistry.of(Workspace.open(ws)).register_checkpoint(
        tiny_checkpoint, stage="sft", name="adder", metrics={"exact_match": 0.25})
    return ws, rec


def cli(capsys, ws: Path, *args: str) -> tuple[int, str]:
    """The CLI's own entry point in this process (exit code, stdout): no interpreter start-up."""
    from trainteam.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["-w", str(ws), *args])
    return exit_.value.code, capsys.readouterr().out


def test_models_list_show_bind_unbind(registered, capsys):
    ws, rec = registered
    code, out = cli(capsys, ws, "models", "list", "--json")
    assert code == 0
    assert [(m["id"], m["name"], m["metrics"]) for m in json.loads(out)] == [(rec.id, "adder", {"exact_match": 0.25})]
    code, out = cli(capsys, ws, "models", "bind", "chat", "adder", "--json")
    assert code == 0 and json.loads(out) == {"role": "chat", "model": rec.id}
    shown = json.loads(cli(capsys, ws, "models", "show", rec.id[:8], "--json")[1])
    assert shown["roles"] == ["chat"] and shown["path"] == rec.path
    assert "chat" in cli(capsys, ws, "models", "list")[1]
    assert json.loads(cli(capsys, ws, "models", "unbind", "chat", "--json")[1]) == {"role": "chat", "was": rec.id}
    assert ModelRegistry.of(Workspace.open(ws)).roles() == {}
    assert cli(capsys, ws, "models", "show", "nope")[0] == 2


def test_unknown_model_is_one_line_exit_2(registered):
    ws, _ = registered
    r = tt(ws, "serve", "role:chat", "--port", "0")  # a real process: exit code and stderr as a person sees them
    assert r.returncode == 2
    assert r.stderr.strip() == "error: role 'chat': no model bound (see `trainteam models bind ROLE MODEL`)"


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
        client = OpenAI(base_url=url.group(1), api_key="k1", max_retries=0, timeout=600)
        assert [m.id for m in client.models.list().data] == [rec.id]
        resp = client.chat.completions.create(model=rec.id, messages=[{"role": "user", "content": "3+4="}],
                                              temperature=0, max_tokens=4)
        assert re.fullmatch(r"\d+", resp.choices[0].message.content)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
