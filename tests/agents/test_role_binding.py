"""`trainteam models bind MODEL --role persona:training_engineer`: that persona's step runs on the
registered model, served on 127.0.0.1 by the runtime, with no other setting; `models unbind` brings
the offline policy back.

The model is real and small: a tiny Llama (tests/tool_model.py) trained on the very conversation a
scripted OpenAI endpoint (tests/scripted_openai.py) plays for this step — the step tool's call, then
the report — so the calls of the bound step are the ones the served model generated."""

from __future__ import annotations

import json
from contextlib import contextmanager

import pytest
from local_http import serving
from persona_helpers import cli, task
from scripted_openai import ScriptedOpenAI
from tool_model import tool_call_text, train_tool_model

from trainteam.agents import transcripts
from trainteam.agents.bound_models import persona_model
from trainteam.agents.runtime import run_persona_step
from trainteam.contract.step_io import StepResult, StepTool, ToolContext
from trainteam.graph import NodeKind
from trainteam.trainers.serving.registry import ModelRegistry
from trainteam.workspace import Workspace

PERSONA, TOOL = "training_engineer", "train_tokenizer"


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    import torch

    torch.set_num_threads(1)
    for var in ("TRAINTEAM_MODEL", "TRAINTEAM_MODEL_TRAINING_ENGINEER", "TRAINTEAM_MODEL_BASE_URL"):
        monkeypatch.delenv(var, raising=False)


def _ctx(ws, ran: list[str]) -> ToolContext:
    def run(ctx: ToolContext) -> StepResult:
        ran.append(ctx.step)
        return StepResult(outcome="ok", summary="tokenizer trained (300 tokens)", metrics={"vocab_size": 300})

    return ToolContext(
        ws=ws,
        run_id="run1",
        step="tokenizer",
        visit=1,
        persona=PERSONA,
        task=task(),
        toolbox={TOOL: StepTool(run=run)},
        progress=False,
    )


@contextmanager
def _scripted():
    ScriptedOpenAI.reset({})
    with serving(ScriptedOpenAI) as url:
        yield url


def _teacher_turns(ws) -> list[tuple[list[dict], list[dict], str]]:
    """The step's conversation as the scripted endpoint plays it: each request and the call it answered."""
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    with _scripted() as url:
        model = OpenAIChatModel("teacher", provider=OpenAIProvider(base_url=url, api_key="k"))
        assert run_persona_step(_ctx(ws, []), TOOL, model=model).outcome == "ok"
        bodies = list(ScriptedOpenAI.requests)
    assert len(bodies) == 2 and not ScriptedOpenAI.errors
    turns = []
    for body in bodies:
        call = ScriptedOpenAI._call(body)
        turns.append((body["messages"], body["tools"], tool_call_text(call["name"], json.loads(call["arguments"]))))
    return turns


def _nodes(ws, kind, **attrs) -> list[dict]:
    return [n for n in ws.graph.nodes(kind) if all(n.get(k) == v for k, v in attrs.items())]


def test_a_bound_persona_runs_on_the_served_model_until_unbound(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    turns = _teacher_turns(ws)
    folder = train_tool_model(tmp_path / "engineer-model", turns, steps=120, vocab_size=2000)
    rec = ModelRegistry.of(ws).register_checkpoint(folder, stage="sft", name="engineer-tiny")

    out = cli(ws.root, "models", "bind", rec.id, "--role", f"persona:{PERSONA}", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == {"role": f"persona:{PERSONA}", "model": rec.id}
    assert ModelRegistry.of(ws).pick_for_role(f"persona:{PERSONA}").id == rec.id

    ran: list[str] = []
    result = run_persona_step(_ctx(ws, ran), TOOL)
    assert result.outcome == "ok" and ran == ["tokenizer"], result.summary
    assert result.details["persona"]["model"] == rec.id
    record = json.loads(open(result.details["persona"]["transcript"]).read())
    assert record["model"] == rec.id and record["status"] == "completed"
    assert [(c["tool"], c["args"]) for c in transcripts.tool_calls(record)] == [
        (TOOL, {"reason": f"the step asks for {TOOL}"})
    ]

    # the graph: the binding, and every call and decision of this agent run attributed to the model
    model_node = f"Model:{rec.id}"
    edges = ws.graph.to_networkx()
    assert any(d["kind"] == "bound_to" for d in edges.get_edge_data(model_node, f"Persona:{PERSONA}").values())
    [binding] = _nodes(ws, NodeKind.DECISION, decision="bind", model=rec.id)
    assert binding["persona"] == PERSONA
    segment = record["segment"]
    calls = [n for n in _nodes(ws, NodeKind.TOOL_CALL, tool=TOOL, model=rec.id) if f"/{segment}/" in n["id"]]
    decisions = _nodes(ws, NodeKind.DECISION, model=rec.id, persona=PERSONA, decision="proceed")
    assert len(calls) == 1 and calls[0]["status"] == "ok" and len(decisions) == 1
    for node in (calls[0]["id"], decisions[0]["id"]):
        assert any(d["kind"] == "decided_by" for d in edges.get_edge_data(node, model_node).values())

    # an explicit per-persona setting wins over the binding
    assert persona_model(ws, PERSONA, {"TRAINTEAM_MODEL_TRAINING_ENGINEER": "offline"}).label == "offline"
    assert persona_model(ws, PERSONA, {"TRAINTEAM_MODEL": "offline"}).label == rec.id

    out = cli(ws.root, "models", "unbind", f"persona:{PERSONA}", "--json")
    assert json.loads(out.stdout) == {"role": f"persona:{PERSONA}", "was": rec.id}
    again = run_persona_step(_ctx(ws, ran), TOOL)
    assert again.outcome == "ok" and again.details["persona"]["model"] == "offline" and len(ran) == 2
    assert _nodes(ws, NodeKind.DECISION, decision="unbind", model=rec.id)


def test_binding_an_unknown_persona_is_one_line(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    out = cli(ws.root, "models", "bind", "m-none", "--role", "persona:nobody")
    assert out.returncode == 2 and out.stderr.strip().startswith("error: --role: unknown persona 'nobody'")
