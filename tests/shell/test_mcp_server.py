"""`trainteam mcp` through the mcp SDK's own client: over stdio (the CLI as a subprocess) and over
streamable HTTP (a real server on 127.0.0.1): the tools and their schemas, plan-first calls that store
nothing, an executed dedup, a tiny workflow run that comes back waiting for a person, lineage, and no
way to decide an approval or raise a budget."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import anyio
from mcp import Client, StdioServerParameters
from spine_helpers import TINY_TASK, _env, cli

TRAIN = {"pretrain_model", "train_sft", "train_dpo", "train_grpo", "train_kto"}
PLAN_FIRST = {"curate_corpus", "dedup_corpus", "decontaminate_corpus", "execute_workflow", "build_training_dataset",
              "train_tokenizer", "merge_adapters_ties", "export_model"} | TRAIN
TOOLS = PLAN_FIRST | {"list_runs", "show_run", "list_approvals", "show_approval", "lineage", "graph_nodes",
                      "dataset_lineage", "compose_reward"}
ROWS = ["the cat sat on the mat and looked at the dog", "the cat sat on the mat and looked at the dog",
        "a completely different sentence about training models", "yet another line of text for the corpus here"]


def _stdio(ws: Path) -> Client:
    return Client(StdioServerParameters(command=sys.executable, args=["-m", "trainteam.cli", "-w", str(ws), "mcp"],
                                        env=_env()))


def _data(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


async def _refused(client: Client, name: str, args: dict) -> str:
    result = await client.call_tool(name, args)
    assert result.is_error
    return result.content[0].text


def test_over_stdio_tools_plan_first_dedup_lineage_and_no_decision_tool(tmp_path, ws):
    corpus = tmp_path / "tiny.jsonl"
    corpus.write_text("".join(json.dumps({"text": t}) + "\n" for t in ROWS))

    async def session() -> None:
        async with _stdio(ws) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            assert set(tools) == TOOLS
            for name in PLAN_FIRST:
                assert tools[name].input_schema["properties"]["execute"]["default"] is False, name
            assert {"corpus", "exact", "near", "text_field"} <= set(tools["dedup_corpus"].input_schema["properties"])
            assert tools["curate_corpus"].input_schema["required"] == ["corpus"]
            assert tools["list_runs"].annotations.read_only_hint is True
            assert not [n for n in tools if any(w in n for w in ("approve", "reject", "decide", "budget"))]

            plan = _data(await client.call_tool("dedup_corpus", {"corpus": str(corpus)}))
            assert plan["executed"] is False and plan["plan"]["config"]["quality"] is None
            assert not list((ws / "datasets").iterdir())  # a plan stores nothing
            assert _data(await client.call_tool("graph_nodes", {"kind": "DatasetVersion"}))["nodes"] == []

            done = _data(await client.call_tool("dedup_corpus", {"corpus": str(corpus), "execute": True}))
            report = done["report"]
            counts = report["counts"]
            assert (counts["input"], counts["output"], counts["exact_duplicates"]) == (4, 3, 1)
            kept = [json.loads(line)["text"] for line in Path(report["output"]).read_text().splitlines()]
            assert sorted(kept) == sorted(set(ROWS))
            assert report["version"] == plan["plan"]["version"]  # the plan said which version it would make

            lineage = _data(await client.call_tool("lineage", {"node": report["node_id"]}))
            assert {n["kind"] for n in lineage["nodes"]} >= {"DatasetVersion", "Corpus"}

            assert "no such file" in await _refused(client, "dedup_corpus", {"corpus": str(tmp_path / "nope.jsonl")})
            # nothing empty or unbounded gets in through MCP either: the same reader, one line, nothing stored
            (tmp_path / "empty.jsonl").write_text("\n \n")
            (tmp_path / "long.jsonl").write_text(json.dumps({"text": "x" * (2 << 20)}) + "\n")
            stored = sorted(p.name for p in (ws / "datasets").iterdir())
            for name in ("dedup_corpus", "curate_corpus"):
                empty = await _refused(client, name, {"corpus": str(tmp_path / "empty.jsonl"), "execute": True})
                assert "empty.jsonl: no rows" in empty, empty
                long = await _refused(client, name, {"corpus": str(tmp_path / "long.jsonl"), "execute": True})
                assert "long.jsonl:1: a row of more than 1,048,576 bytes" in long, long
            assert sorted(p.name for p in (ws / "datasets").iterdir()) == stored
            assert "limit" in await _refused(client, "list_runs", {"limit": 0})
            nope = {"model": "m-nope", "format": "gguf", "out": str(tmp_path / "exported")}
            assert "is not registered" in await _refused(client, "export_model", nope)
            assert not (tmp_path / "exported").exists()
            misspelt = await _refused(client, "dedup_corpus", {"corpus": str(corpus), "exectue": True})
            assert "unknown argument 'exectue'" in misspelt
            for name in ("approve", "reject", "decide_approval", "raise_budget"):
                assert "Unknown tool" in await _refused(client, name, {"approval_id": "x"})

    anyio.run(session)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _serve_http(ws: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-m", "trainteam.cli", "-w", str(ws), "mcp", "--http", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env())
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise AssertionError("the MCP HTTP server did not listen within 30 s")


def test_over_http_a_tiny_workflow_run_comes_back_waiting_for_a_person(tmp_path, ws):
    port = _free_port()
    server = _serve_http(ws, port)
    task = {**TINY_TASK, "name": "mcp-tiny"}
    run_id = None

    async def session() -> str:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            assert {t.name for t in (await client.list_tools()).tools} == TOOLS
            plan = _data(await client.call_tool("execute_workflow", {"task": task, "overrides": {"pretrain": {
                "max_steps": 4}}}))
            assert plan["executed"] is False and plan["plan"]["stages"]["pretrain"]["max_steps"] == 4
            assert "register_model (ml_orchestrator)" in plan["plan"]["steps"]
            assert _data(await client.call_tool("list_runs", {}))["runs"] == []  # a plan stores nothing
            refused = await _refused(client, "execute_workflow", {"task": task, "execute": True,
                                                                  "overrides": {"sft": {"max_steps": 2}}})
            assert "overrides: stage 'sft' is not in the task's stages" in refused
            assert "task: give either" in await _refused(client, "execute_workflow", {"execute": True})

            # a training tool is a run like any other: its task written from the tool's arguments
            fields = {k: task[k] for k in ("name", "model", "data", "budget", "training", "gates")}
            run = _data(await client.call_tool("pretrain_model", {**fields, "execute": True, "run_id": "m1",
                                                                  "wait_seconds": 180}, read_timeout_seconds=200))
            assert (run["run_id"], run["status"]) == ("m1", "waiting_approval"), run
            (waiting,) = run["pending_approvals"]
            assert waiting["action"] == "register_model"

            listed = _data(await client.call_tool("list_approvals", {"run_id": "m1"}))["approvals"]
            assert [a["short_id"] for a in listed] == [waiting["short_id"]]
            assert listed[0]["registration"]["metrics"]  # the evidence a person will decide on
            shown = _data(await client.call_tool("show_run", {"run_id": "m1"}))
            assert shown["status"] == "waiting_approval"
            assert (shown["steps"][-1]["name"], shown["steps"][-1]["status"]) == ("register_model", "needs_approval")
            model_ckpt = listed[0]["registration"]["checkpoint"]["node"]
            lineage = _data(await client.call_tool("lineage", {"node": model_ckpt}))
            assert {"Run", "Tokenizer", "DatasetVersion"} <= {n["kind"] for n in lineage["nodes"]}
            assert "Unknown tool" in await _refused(client, "approve", {"approval_id": waiting["short_id"]})
            return "m1"

    try:
        run_id = anyio.run(session)
        # nothing decided it: only a person can, outside MCP
        rows = json.loads(cli(ws, "approvals", "list", "--json", check=True).stdout)
        assert [(r["run_id"], r["status"]) for r in rows] == [("m1", "pending")]
    finally:
        if run_id is not None or (ws / "trainteam.db").exists():
            cli(ws, "runs", "cancel", "m1")  # the run's own process exits once cancelled
        server.terminate()
        server.wait(timeout=30)


def test_a_port_in_use_is_one_line_and_exit_2(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "trainteam.cli", "-w", str(tmp_path / "ws"), "mcp", "--http",
                               str(port)], capture_output=True, text=True, timeout=600, env=_env())
    assert proc.returncode == 2
    refused = f"error: --http: cannot listen on 127.0.0.1:{port} (Address already in use)"
    assert proc.stderr.strip().splitlines() == [refused]


def _two_adapters(folder: Path) -> list[Path]:
    """Two LoRA adapters (random, non-zero deltas) of one tiny local Llama."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    base = folder / "base"
    LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 num_key_value_heads=2, vocab_size=64)).save_pretrained(base)
    out = []
    for i in range(2):
        torch.manual_seed(i)
        model = get_peft_model(LlamaForCausalLM.from_pretrained(base), LoraConfig(r=2, target_modules=["q_proj"]))
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.data.normal_()
        model.save_pretrained(folder / f"adapter{i}")
        out.append(folder / f"adapter{i}")
    return out


def test_training_tools_plan_a_run_and_artifact_tools_record_what_they_make(tmp_path, ws):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"{t} {i}"}) + "\n" for i, t in enumerate(ROWS)))
    traces = tmp_path / "traces.jsonl"
    traces.write_text("".join(json.dumps(r) + "\n" for r in [{"prompt": "1+1=", "completion": "2", "ok": True},
                                                               {"prompt": "2+2=", "completion": "5", "ok": False}]))
    adapters = _two_adapters(tmp_path)
    fields = {k: TINY_TASK[k] for k in ("name", "model", "data", "budget", "training", "gates")}

    async def session() -> None:
        async with _stdio(ws) as client:
            tools = {t.name: t for t in (await client.list_tools()).tools}
            for name in TRAIN:
                props = tools[name].input_schema["properties"]
                assert {"model", "data", "budget", "training", "execute"} <= set(props), name
            plan = _data(await client.call_tool("pretrain_model", fields))
            assert (plan["executed"], plan["tool"]) == (False, "pretrain_model")
            assert list(plan["plan"]["stages"]) == ["pretrain"] and plan["plan"]["stages"]["pretrain"]["max_steps"] == 6
            # the task's own rules speak: sft needs a trained model
            assert "give model.path, or pretrain first" in await _refused(client, "train_sft", fields)
            grpo = _data(await client.call_tool("train_grpo", {**fields, "before": ["pretrain", "sft"]}))
            assert list(grpo["plan"]["stages"]) == ["pretrain", "sft", "grpo"]
            assert _data(await client.call_tool("list_runs", {}))["runs"] == []  # plans start nothing

            scored = _data(await client.call_tool("compose_reward", {"samples": [
                {"completion": " 42 ", "reference": "42"}, {"completion": "41", "reference": "42"},
                {"completion": "42", "reference": "42", "ended_with_eos": False}]}))
            assert [s["grpo"]["total"] for s in scored["samples"]] == [1.2, 0.2, 1.0] and scored["correct"] == 2

            tok_args = {"corpus": str(corpus), "config": {"vocab_size": 280}}
            tok_plan = _data(await client.call_tool("train_tokenizer", tok_args))
            assert not Path(tok_plan["plan"]["out"]).exists()
            tok = _data(await client.call_tool("train_tokenizer", {"corpus": str(corpus), "config": {"vocab_size": 280},
                                                                   "execute": True}))
            assert (Path(tok["path"]) / "tokenizer.json").is_file() and tok["path"] == tok_plan["plan"]["out"]
            tok_lineage = _data(await client.call_tool("lineage", {"node": tok["node_id"]}))
            assert [n["source"] for n in tok_lineage["nodes"] if n["kind"] == "Corpus"] == [str(corpus)]

            built_plan = _data(await client.call_tool("build_training_dataset", {"kind": "sft", "source": str(traces)}))
            built = _data(await client.call_tool("build_training_dataset", {"kind": "sft", "source": str(traces),
                                                                            "execute": True}))
            assert (built["version"], built["rows"], built["reused"]) == (built_plan["plan"]["version"], 1, False)
            lineage = _data(await client.call_tool("dataset_lineage", {"version": built["version"]}))
            assert {n["kind"] for n in lineage["nodes"]} == {"DatasetVersion", "Corpus"}
            assert "no dataset version 'nope'" in await _refused(client, "dataset_lineage", {"version": "nope"})

            paths = [str(a) for a in adapters]
            assert "weights: 1 weights for 2 adapters" in await _refused(
                client, "merge_adapters_ties", {"adapters": paths, "weights": [1.0]})
            merge_plan = _data(await client.call_tool("merge_adapters_ties", {"adapters": paths}))
            assert not Path(merge_plan["plan"]["out"]).exists()
            merged = _data(await client.call_tool("merge_adapters_ties", {"adapters": paths, "execute": True},
                                                  read_timeout_seconds=120))
            assert (Path(merged["path"]) / "model.safetensors").is_file()
            node = next(n for n in _data(await client.call_tool("graph_nodes", {"kind": "Checkpoint"}))["nodes"]
                        if n["id"] == merged["node_id"])
            assert (node["method"], node["adapters"]) == ("ties", [str(a.resolve()) for a in adapters])

    anyio.run(session)
