"""The compact prompt (agents/compact.py): what a persona bound with `--prompt compact` sends its model is
exactly what `transcripts export --format chat --prompt compact` writes for that turn — the short
system turn, only the step's tool and the report tool with compact schemas, the same calls — so a model
trained on the export is asked what it learnt. Checked over real HTTP against a scripted OpenAI endpoint."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from local_http import serving
from persona_helpers import cli, task
from scripted_openai import ScriptedOpenAI

from trainteam.agents import compact
from trainteam.agents.bound_models import bind_role, persona_model
from trainteam.agents.chat_export import chat_row
from trainteam.agents.runtime import run_persona_step
from trainteam.contract.step_io import StepResult, StepTool, ToolContext
from trainteam.trainers.serving.registry import ModelRegistry
from trainteam.workspace import Workspace

PERSONA, TOOL = "training_engineer", "train_tokenizer"


@pytest.fixture(autouse=True)
def _no_model_settings(monkeypatch):
    for var in ("TRAINTEAM_MODEL", "TRAINTEAM_MODEL_TRAINING_ENGINEER", "TRAINTEAM_MODEL_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


def _toolbox() -> dict:
    def run(ctx: ToolContext) -> StepResult:
        return StepResult(outcome="ok", summary="tokenizer trained (300 tokens)", metrics={"vocab_size": 300})

    def other(ctx: ToolContext) -> StepResult:
        raise AssertionError("a compact run offers only the step's tool")

    return {TOOL: StepTool(run=run), "train": StepTool(run=other), "merge_adapters": StepTool(run=other)}


def _ctx(ws, toolbox) -> ToolContext:
    return ToolContext(
        ws=ws, run_id="run1", step="tokenizer", visit=1, persona=PERSONA, task=task(), toolbox=toolbox, progress=False
    )


@contextmanager
def _scripted_model():
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    ScriptedOpenAI.reset({})
    with serving(ScriptedOpenAI) as url:
        yield OpenAIChatModel("teacher", provider=OpenAIProvider(base_url=url, api_key="k"))


def _shape(messages: list[dict]) -> list[tuple]:
    """Role, text and calls of each turn (ids and JSON spelling aside)."""
    out = []
    for m in messages:
        calls = [
            (
                c["function"]["name"],
                c["function"]["arguments"]
                if isinstance(c["function"]["arguments"], dict)
                else json.loads(c["function"]["arguments"]),
            )
            for c in m.get("tool_calls") or []
        ]
        text = m.get("content") or ""
        out.append((m["role"], json.loads(text) if m["role"] == "tool" else text, calls))
    return out


def test_a_compact_run_sends_what_the_compact_export_writes(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    toolbox = _toolbox()
    with _scripted_model() as model:
        result = run_persona_step(_ctx(ws, toolbox), TOOL, model=model, prompt="compact")
    assert result.outcome == "ok", result.summary
    assert not ScriptedOpenAI.errors
    first, last = ScriptedOpenAI.requests[0], ScriptedOpenAI.requests[-1]
    record = json.loads(open(result.details["persona"]["transcript"]).read())
    assert record["prompt_style"] == "compact" and record["tools"] == [TOOL]

    row = chat_row(record, toolbox, "compact")
    assert [t["function"]["name"] for t in first["tools"]] == [TOOL, compact.FINAL]  # not train, merge_adapters
    for sent, written in zip(first["tools"], row.tools, strict=True):
        assert {k: sent["function"][k] for k in ("name", "description", "parameters")} == written["function"]
    system = row.messages[0]
    assert system == {"role": "system", "content": compact.instructions(_card(), TOOL)}
    assert len(system["content"]) < 400
    # the final request holds every turn before the report; the row holds them and the report as a call
    assert _shape(last["messages"]) == _shape(row.messages[:-1])
    sent_results = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    assert sent_results and sent_results == [m["content"] for m in row.messages if m["role"] == "tool"]  # same text
    assert row.messages[-1]["tool_calls"][0]["function"]["name"] == compact.FINAL
    assert row.messages[-1]["tool_calls"][0]["function"]["arguments"]["summary"] == f"{TOOL} done"


def _card():
    from trainteam.agents.cards import load_card

    return load_card(PERSONA)


def test_the_binding_carries_the_prompt_style(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"\0" * 16)  # registered, never loaded: serving is not asked here
    (folder / "config.json").write_text("{}")
    rec = ModelRegistry.of(ws).register_checkpoint(folder, stage="sft", name="tiny")
    registry = ModelRegistry.of(ws)
    bind_role(ws, f"persona:{PERSONA}", rec.id, by="test", prompt="compact")
    assert registry.role_prompt(f"persona:{PERSONA}") == "compact"
    bind_role(ws, f"persona:{PERSONA}", rec.id, by="test")
    assert registry.role_prompt(f"persona:{PERSONA}") == "full"
    out = cli(ws.root, "models", "bind", rec.id, "--role", f"persona:{PERSONA}", "--prompt", "compact", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["prompt"] == "compact", out.stderr
    assert registry.role_prompt(f"persona:{PERSONA}") == "compact"
    cli(ws.root, "models", "unbind", f"persona:{PERSONA}")
    assert registry.role_prompt(f"persona:{PERSONA}") == "full"
    assert persona_model(ws, PERSONA, {}).label == "offline"

    bad = cli(ws.root, "models", "bind", rec.id, "--role", f"persona:{PERSONA}", "--prompt", "tiny")
    assert bad.returncode == 2 and bad.stderr.strip() == "error: --prompt: 'tiny' is not one of full, compact"
    bad = cli(ws.root, "models", "bind", rec.id, "--role", "chat", "--prompt", "compact")
    assert bad.returncode == 2 and "applies to a persona:NAME role" in bad.stderr
