"""`models export --format hf` of a small trained model, through the real CLI: the folder a transformers user loads
(safetensors, tokenizer, a generation config that stops at the model's end token, a model card in the Hub's format),
read back against the registered model before it is done, recorded in the graph and listed by `models show`."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import yaml


def _cli(ws, *args, cwd):
    env = {**os.environ, "TRAINTEAM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "trainteam.cli", "-w", str(ws), *args], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=600)


def test_hf_export_is_a_folder_transformers_loads_with_its_card(tmp_path, tiny_checkpoint, addition_data):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainteam.trainers.serving.registry import ModelRegistry
    from trainteam.workspace import Workspace

    folder = tmp_path / "tiny-addition"
    shutil.copytree(tiny_checkpoint, folder)
    ws = Workspace.open(tmp_path / "ws")
    record = ModelRegistry.of(ws).register_checkpoint(folder, stage="sft", name="adder", metrics={"exact_match": 0.9})
    ws.engine.dispose()
    _, held = addition_data
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held[:24]))
    out = tmp_path / "adder-hf"
    proc = _cli(tmp_path / "ws", "models", "export", "adder", "--format", "hf", "--out", str(out), "--rows",
                str(tmp_path / "rows.jsonl"), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    answers, tokens = result["check"]["answers"], result["check"]["tokenizer"]
    assert answers["exported"] == answers["registered"] and answers["same_answers"] == answers["rows"] == 24
    assert answers["stops_exported"] == answers["stops_registered"] == 24
    assert tokens["identical_ids"] == tokens["round_trips"] == 24
    assert {"README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in out.iterdir()}
    assert not list(out.glob("*.txt"))  # the trainer's leftovers (train_losses.txt) stay behind
    card = (out / "README.md").read_text()
    meta = yaml.safe_load(card.split("---")[1])
    assert meta["library_name"] == "transformers" and meta["pipeline_tag"] == "text-generation"
    assert meta["license"] == "other" and "license was not found" in card and "exact_match" in card
    tokenizer = AutoTokenizer.from_pretrained(out)
    generation = json.loads((out / "generation_config.json").read_text())
    assert tokenizer.eos_token_id in ([generation["eos_token_id"]] if isinstance(generation["eos_token_id"], int)
                                      else generation["eos_token_id"])
    assert AutoModelForCausalLM.from_pretrained(out).num_parameters() > 0
    shown = json.loads(_cli(tmp_path / "ws", "models", "show", record.id, "--json", cwd=tmp_path).stdout)
    assert [(e["format"], e["sha256"]) for e in shown["exports"]] == [("hf", result["sha256"])]
    nodes = json.loads(_cli(tmp_path / "ws", "graph", "nodes", "--kind", "Export", "--json", cwd=tmp_path).stdout)
    assert len(nodes) == 1 and nodes[0]["model"] == record.id
