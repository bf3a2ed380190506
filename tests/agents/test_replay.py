"""Transcripts replayed: the story of a run, its deterministic re-execution, and SFT data made from it."""

from __future__ import annotations

import json

from persona_helpers import cli, ctx, fake_checkpoint, final_eval_output, task

from trainteam.agents.replay import replay_run, sft_examples, steps_of
from trainteam.agents.runtime import resume_persona_step, run_persona_step
from trainteam.contract.train_task import TrainTask
from trainteam.workflows.steps import STEPS
from trainteam.workspace import Workspace


def _record_run(ws, t=None):
    """Two personas, one of them through an approval: the run a replay must reproduce."""
    t = t or task()
    prepared = run_persona_step(ctx(ws, "data_curator", "prepare_corpus", t), "prepare_corpus")
    assert prepared.outcome == "ok"
    c = ctx(
        ws,
        "ml_orchestrator",
        "register_model",
        t,
        outputs={
            "prepare_corpus": prepared.model_dump(mode="json"),
            "final_eval": final_eval_output(ws, fake_checkpoint(ws)),
        },
    )
    waiting = run_persona_step(c, "register_model")
    done = resume_persona_step(c, "register_model", waiting.needs.resume.pending, True, "ship it")
    assert done.outcome == "ok"
    return prepared, done


def test_steps_of_a_run_tell_persona_prompt_calls_results_decisions_and_approvals(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    _record_run(ws)
    steps = steps_of(ws, "run1")
    assert [(s["step"], s["persona"]) for s in steps] == [
        ("prepare_corpus", "data_curator"),
        ("register_model", "ml_orchestrator"),
    ]
    first, second = steps
    assert "prepare_corpus" in first["prompt"] and first["calls"][0]["tool"] == "prepare_corpus"
    assert first["calls"][0]["result"]["outcome"] == "ok" and first["decision"]["decision"] == "proceed"
    assert second["approvals"][0]["approved"] is True and second["approvals"][0]["note"] == "ship it"
    assert second["calls"][0]["tool"] == "register_model" and second["outcome"] == "ok"


def test_replay_execute_reproduces_the_same_tool_calls_and_artifacts(tmp_path):
    src = Workspace.open(tmp_path / "src")
    _record_run(src)
    report = replay_run(src, "run1", Workspace.open(tmp_path / "dest"), STEPS, TrainTask.model_validate)
    assert report.identical, report.model_dump()
    assert [s.segment for s in report.steps] == ["prepare_corpus#1", "register_model#1"]
    assert report.steps[0].replayed_calls == report.steps[0].recorded_calls != []
    assert (tmp_path / "dest" / "transcripts" / "run1" / "register_model#1.json").exists()
    replayed = json.loads((tmp_path / "dest" / "transcripts" / "run1" / "register_model#1.json").read_text())
    assert replayed["approvals"][0]["approved"] is True  # the recorded decision was given back


def test_replay_reports_a_changed_input_as_an_artifact_difference(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    rows = "".join(json.dumps({"prompt": f"{a}+1=", "completion": str(a + 1)}) + "\n" for a in range(6))
    (data / "train.jsonl").write_text(rows)
    (data / "eval.jsonl").write_text(rows)
    t = task(data={"path": str(data / "train.jsonl"), "eval_path": str(data / "eval.jsonl")})
    src = Workspace.open(tmp_path / "src")
    run_persona_step(ctx(src, "data_curator", "prepare_corpus", t), "prepare_corpus")
    (data / "train.jsonl").write_text(rows + json.dumps({"prompt": "9+1=", "completion": "10"}) + "\n")
    report = replay_run(src, "run1", Workspace.open(tmp_path / "dest"), STEPS, TrainTask.model_validate)
    assert not report.identical
    step = report.steps[0]
    assert step.replayed_calls == step.recorded_calls  # the same decisions...
    assert set(step.hash_differences) == {"train"}  # ...on different data


def test_replay_cli_shows_and_re_executes(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    _record_run(ws)
    shown = cli(ws.root, "replay", "run1", "--instructions")
    assert shown.returncode == 0, shown.stderr
    for needle in (
        "prepare_corpus#1",
        "data_curator",
        "→ prepare_corpus(",
        "decision: proceed",
        "register_model approved by a person: ship it",
        "instructions:",
        "## Budget",
    ):
        assert needle in shown.stdout, needle
    executed = cli(ws.root, "replay", "run1", "--execute", "--into", str(tmp_path / "fresh"), "--json")
    assert executed.returncode == 0, executed.stderr
    out = json.loads(executed.stdout)
    assert out["identical"] is True and out["same"] == {"prepare_corpus#1": True, "register_model#1": True}
    missing = cli(ws.root, "replay", "nope")
    assert missing.returncode == 2 and "no transcripts for run 'nope'" in missing.stderr


def test_transcripts_export_sft_through_the_curation_builders(tmp_path):
    ws = Workspace.open(tmp_path / "ws")
    _record_run(ws)
    examples = sft_examples(ws)
    assert len(examples) == 2
    first = examples[0]
    assert first["prompt"][0]["role"] == "system" and "data_curator" in first["prompt"][0]["content"]
    assert first["completion"][0]["role"] == "assistant"
    out = tmp_path / "sft.jsonl"
    proc = cli(ws.root, "transcripts", "export", "--format", "sft", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line) for line in out.read_text().splitlines()] == json.loads(json.dumps(examples))
    listed = json.loads(cli(ws.root, "transcripts", "list", "--json").stdout)
    assert [(r["segment"], r["persona"], r["status"]) for r in listed] == [
        ("prepare_corpus#1", "data_curator", "completed"),
        ("register_model#1", "ml_orchestrator", "completed"),
    ]
    bad = cli(ws.root, "transcripts", "export", "--format", "dpo")
    assert bad.returncode == 2 and "--format" in bad.stderr
