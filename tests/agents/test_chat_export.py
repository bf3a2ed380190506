"""Transcripts as chat data with tool calls: real tiny train_model runs → `transcripts export --format
chat` → `curate run --heldout-by run_id` → the SFT data path and a chat template with tools."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from spine_helpers import TINY_TASK, cli  # noqa: E402

from trainteam.core.errors import BadInput  # noqa: E402

KEY = "sk-chatexport0123456789abcdef"  # a fake provider key: in the env and pasted into the task's text
ENV = {"FAKE_SERVICE_API_KEY": KEY}
# A small tool-calling chat template (the shape of Hermes/Qwen's): tools as JSON, calls in <tool_call> tags.
TEMPLATE = (
    "{%- if tools %}<|system|>Tools:\n{% for t in tools %}{{ t | tojson }}\n{% endfor %}<|end|>\n{% endif %}"
    "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}"
    "{% if m.tool_calls is defined and m.tool_calls %}{% for c in m.tool_calls %}<tool_call>"
    '{"name": "{{ c.function.name }}", "arguments": {{ c.function.arguments | tojson }}}</tool_call>'
    "{% endfor %}{% endif %}<|end|>\n{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def _run(ws: Path, tmp: Path, run_id: str) -> subprocess.Popen:
    task = tmp / f"{run_id}.yaml"
    task.write_text(yaml.safe_dump({**TINY_TASK, "description": f"the key is {KEY}"}))
    env = {**os.environ, **ENV, "OMP_NUM_THREADS": "1", "TRAINTEAM_THREADS": "1"}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainteam.cli",
            "-w",
            str(ws),
            "execute-workflow",
            "train_model",
            "--task",
            str(task),
            "--run-id",
            run_id,
            "--yes",
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Two real tiny runs (two workspaces, side by side), their chat rows joined in one file."""
    tmp = tmp_path_factory.mktemp("chat")
    procs = {rid: _run(tmp / rid, tmp, rid) for rid in ("r1", "r2")}
    for rid, proc in procs.items():
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, f"run {rid}: {err[-2000:]}"
    with (tmp / "all.jsonl").open("w") as fh:
        for rid in procs:
            out = tmp / f"{rid}.jsonl"
            cli(tmp / rid, "transcripts", "export", "--format", "chat", "-o", str(out), check=True, env=ENV)
            fh.write(out.read_text())
    return tmp


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_each_persona_turn_is_a_conversation_with_tool_calls_and_tool_schemas(runs):
    rows = _rows(runs / "r1.jsonl")
    assert {r["persona"] for r in rows} == {"data_curator", "training_engineer", "eval_judge", "ml_orchestrator"}
    train = next(r for r in rows if r["step"] == "train")
    roles = [m["role"] for m in train["messages"]]
    assert roles[:2] == ["system", "user"] and roles[-1] == "assistant" and "tool" in roles
    assert "training_engineer" in train["messages"][0]["content"]
    calls = [c for m in train["messages"] for c in m.get("tool_calls", [])]
    assert [c["function"]["name"] for c in calls] == ["train", "train"]  # plan-first: the plan, then execute
    assert [c["function"]["arguments"]["execute"] for c in calls] == [False, True]
    # each call's arguments in the order the runtime declares them (reason first), not the sorted order
    # transcripts store (a model writes a call left to right: the reason is written before execute)
    assert [list(c["function"]["arguments"]) for c in calls] == [["reason", "execute"]] * 2
    assert all(c["type"] == "function" and c["id"] for c in calls)
    results = [m for m in train["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in results] == [c["id"] for c in calls]
    assert json.loads(results[1]["content"])["executed"] is True
    assert json.loads(train["messages"][-1]["content"])["decision"] == "proceed"  # the final answer: the report
    schemas = {t["function"]["name"]: t for t in train["tools"]}
    assert set(schemas) == {"train_tokenizer", "train", "align", "merge_adapters"}
    params = schemas["train"]["function"]["parameters"]
    assert params["type"] == "object" and {"reason", "execute", "overrides"} <= set(params["properties"])
    assert all(t["type"] == "function" and t["function"]["description"] for t in train["tools"])


def test_nothing_secret_is_exported(runs):
    text = (runs / "all.jsonl").read_text()
    assert KEY not in text
    assert "[REDACTED]" in text  # the key reached the instructions and was masked there


def test_persona_and_step_filters_and_bad_input(runs):
    ws = runs / "r1"
    proc = cli(
        ws,
        "transcripts",
        "export",
        "--format",
        "chat",
        "--persona",
        "eval_judge",
        "--step",
        "gate",
        check=True,
        env=ENV,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert rows and {(r["persona"], r["step"]) for r in rows} == {("eval_judge", "gate")}
    for args, field in (
        (["--format", "xml"], "--format"),
        (["--format", "chat", "--persona", "nobody"], "--persona"),
        (["--format", "chat", "--run", "nope"], "--run"),
    ):
        bad = cli(ws, "transcripts", "export", *args)
        assert bad.returncode == 2 and field in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_only_completed_runs_by_default(runs):
    """A run still waiting for a person is left out unless --status all."""
    from trainteam.workflows.engine.store import RunStore
    from trainteam.workspace import Workspace

    ws = runs / "r1"
    RunStore(Workspace.open(ws).engine).set_status("r1", "waiting_approval", only_if_not_final=False)
    try:
        assert cli(ws, "transcripts", "export", "--format", "chat", check=True).stdout == ""
        every = cli(ws, "transcripts", "export", "--format", "chat", "--status", "all", check=True).stdout
        assert len(every.splitlines()) == len(_rows(runs / "r1.jsonl"))
    finally:
        RunStore(Workspace.open(ws).engine).set_status("r1", "completed", only_if_not_final=False)


def test_curate_dedups_and_holds_out_whole_runs(runs):
    doubled = runs / "doubled.jsonl"
    doubled.write_text((runs / "all.jsonl").read_text() + (runs / "r1.jsonl").read_text())  # r1's turns twice
    config = runs / "chat_curation.yaml"
    config.write_text(yaml.safe_dump({"near_dedup": None}))
    out = runs / "curated"
    proc = cli(
        runs / "r1",
        "curate",
        "run",
        str(doubled),
        "--config",
        str(config),
        "--heldout-by",
        "run_id",
        "--heldout-fraction",
        "0.5",
        "-o",
        str(out),
        "--json",
        check=True,
    )
    report = json.loads(proc.stdout)
    n = len(_rows(runs / "all.jsonl"))
    assert report["counts"]["input"] == n + len(_rows(runs / "r1.jsonl"))
    assert report["counts"]["exact_duplicates"] == len(_rows(runs / "r1.jsonl"))
    train, held = _rows(out / "train.jsonl"), _rows(out / "heldout.jsonl")
    assert len(train) + len(held) == n
    assert {r["run_id"] for r in train} & {r["run_id"] for r in held} == set()
    assert {r["run_id"] for r in held} == set(report["split"]["heldout_groups"]) and len(held) > 0
    one = cli(runs / "r1", "curate", "run", str(runs / "r1.jsonl"), "--heldout-by", "run_id")
    assert one.returncode == 2 and "1 group (r1)" in one.stderr
    assert not (runs / "r1" / "datasets").exists() or not any((runs / "r1" / "datasets").rglob("heldout.jsonl"))


def test_curated_rows_reach_the_chat_template_with_their_tools(runs):
    """The SFT data path: canonical rows, row checks, the SFT dataset, a template that renders tools."""
    from transformers import PreTrainedTokenizerFast

    from trainteam.curation.row_checks import problems
    from trainteam.curation.rows import read_rows
    from trainteam.trainers.methods.method_data import load_data
    from trainteam.trainers.methods.sft import row_lengths, sft_dataset

    path = runs / "all.jsonl"
    assert all(problems(r) == [] for r in read_rows(path))
    tokenizer = PreTrainedTokenizerFast.from_pretrained(next((runs / "r1").rglob("tokenizer.json")).parent)
    tokenizer.chat_template = TEMPLATE
    ds = sft_dataset(tokenizer, load_data(path, "sft"))
    assert set(ds.column_names) == {"prompt", "completion", "tools"}
    gate = next(
        r
        for r in ds
        if r["completion"][0].get("tool_calls") and r["completion"][0]["tool_calls"][0]["function"]["name"] == "gate"
    )
    # each row keeps its own arguments and schemas (no key of another row's, filled with null)
    assert gate["completion"][0]["tool_calls"][0]["function"]["arguments"] == {"reason": "step gate runs gate"}
    assert all("overrides" not in t["function"]["parameters"]["properties"] for t in gate["tools"])
    text = tokenizer.apply_chat_template(gate["prompt"] + gate["completion"], tools=gate["tools"], tokenize=False)
    assert '"name": "gate"' in text and '{"name": "gate", "arguments": {"reason": "step gate runs gate"}}' in text
    assert "null" not in text.split("<|end|>")[0]  # the tool schemas as written
    assert min(row_lengths(tokenizer, ds)) > 0
    # a template that drops tool calls (SmolLM2-Instruct's ChatML) would teach empty answers: refused by name
    tokenizer.chat_template = CHATML
    with pytest.raises(BadInput, match="chat template does not write tool calls"):
        sft_dataset(tokenizer, load_data(path, "sft"))


def test_the_final_answer_is_what_the_persona_runtime_takes_as_its_report(runs):
    """A model that answers as the rows teach (the report as JSON text) ends the persona's Agent run."""
    from pydantic_ai import Agent, DeferredToolRequests
    from pydantic_ai.messages import ModelResponse, TextPart
    from pydantic_ai.models.function import FunctionModel

    from trainteam.agents.runtime import OUTPUT_TYPES, PersonaReport

    final = next(r for r in _rows(runs / "r1.jsonl") if r["step"] == "gate")["messages"][-1]["content"]
    model = FunctionModel(lambda messages, info: ModelResponse(parts=[TextPart(final)]))
    assert DeferredToolRequests in OUTPUT_TYPES
    report = Agent(model, output_type=OUTPUT_TYPES).run_sync("report").output
    assert isinstance(report, PersonaReport) and report.decision == "pass"
