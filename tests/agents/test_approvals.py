"""A gated tool (register_model) through pydantic-ai's approval mechanism, across two processes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from persona_helpers import ctx, fake_checkpoint, final_eval_output, run_py

from trainteam.agents.runtime import resume_persona_step, run_persona_step
from trainteam.core.errors import BadInput
from trainteam.trainers.serving.registry import ModelRegistry
from trainteam.workspace import Workspace

SETUP = """
import json, sys
from pathlib import Path
from persona_helpers import ctx, task
from trainteam.workspace import Workspace
ws = Workspace.open(sys.argv[1] if len(sys.argv) > 1 else {ws!r})
outputs = json.loads(Path({outputs!r}).read_text())
c = ctx(ws, "ml_orchestrator", "register_model", outputs=outputs)
"""


def test_gated_tool_waits_in_one_process_and_is_approved_in_another(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    outputs_file = tmp_path / "outputs.json"
    outputs_file.write_text(json.dumps({"final_eval": final_eval_output(ws, fake_checkpoint(ws))}))
    pending_file = tmp_path / "pending.json"
    setup = SETUP.format(ws=str(ws.root), outputs=str(outputs_file))

    run_py(
        setup
        + f"""
from trainteam.agents.runtime import run_persona_step
r = run_persona_step(c, "register_model")
assert r.outcome == "needs_approval", r
Path({str(pending_file)!r}).write_text(r.needs.model_dump_json())
"""
    )
    needs = json.loads(pending_file.read_text())
    assert needs["action"] == "register_model" and needs["resume"]["kind"] == "conversation"
    assert needs["proposed"]["tool"] == "register_model" and needs["proposed"]["persona"] == "ml_orchestrator"
    assert needs["resume"]["pending"]["approvals"][0]["tool_name"] == "register_model"
    assert ModelRegistry.of(ws).list() == []  # nothing registered while a person has not decided
    record = json.loads((ws.dir("transcripts") / "run1" / "register_model#1.json").read_text())
    assert record["status"] == "needs_approval"

    run_py(
        setup
        + f"""
from trainteam.agents.runtime import resume_persona_step
needs = json.loads(Path({str(pending_file)!r}).read_text())
r = resume_persona_step(c, "register_model", needs["resume"]["pending"], True, "looks good")
assert r.outcome == "ok", r
print(r.details["model_id"])
"""
    )
    models = ModelRegistry.of(ws).list()
    assert len(models) == 1 and models[0].name == "tiny"
    record = json.loads((ws.dir("transcripts") / "run1" / "register_model#1.json").read_text())
    assert record["status"] == "completed"
    assert record["approvals"][0]["approved"] is True and record["approvals"][0]["note"] == "looks good"
    kinds = [p["part_kind"] for m in record["messages"] for p in m["parts"]]
    assert kinds.count("tool-call") == 2  # the gated call, then the report; the conversation was continued


def test_a_rejected_call_never_runs_and_the_step_says_who_decided(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    c = ctx(ws, "ml_orchestrator", "register_model", outputs={"final_eval": final_eval_output(ws, fake_checkpoint(ws))})
    waiting = run_persona_step(c, "register_model")
    assert waiting.outcome == "needs_approval"
    pending = json.loads(json.dumps(waiting.needs.resume.pending))  # JSON round trip, as through a database
    result = resume_persona_step(c, "register_model", pending, False, "not this one")
    assert result.outcome == "error"
    assert "rejected register_model: not this one" in result.summary
    assert ModelRegistry.of(ws).list() == []
    assert result.details["persona"]["decision"] == "stop"


def test_resume_refuses_a_pending_of_another_step(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    c = ctx(ws, "ml_orchestrator", "register_model", outputs={"final_eval": final_eval_output(ws, fake_checkpoint(ws))})
    with pytest.raises(BadInput, match="pending: not a pending persona run"):
        resume_persona_step(c, "register_model", {"messages": []}, True, None)
    waiting = run_persona_step(c, "register_model")
    other = ctx(ws, "eval_judge", "gate")
    with pytest.raises(BadInput, match="belongs to ml_orchestrator/register_model"):
        resume_persona_step(other, "gate", waiting.needs.resume.pending, True, None)
    assert Path(waiting.details["transcript"]).exists()
