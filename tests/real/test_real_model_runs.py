"""A real pretrained instruct model and a user's own chat data, end to end through ``execute-workflow``.

The model is SmolLM2-135M-Instruct, imported from its GGUF file by the ``real_model`` fixture
(tests/real_model.py). The data is what a user holds: a Parquet file of ``messages`` rows and
TRL's key names in the task, no curation settings. Each run is a real ``trainteam`` subprocess;
the registered folder is then reloaded by plain transformers and served by ``trainteam serve``.
Sized for 2 CPU cores: LoRA, a few dozen steps, short rows.
"""

from __future__ import annotations

import json
import math
import os
import random
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from trainteam.curation import formats as F

CLI = [sys.executable, "-m", "trainteam.cli"]
# Both cores when the file runs alone; one under xdist, where the other worker holds the other core.
THREADS = "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2"
ENV = {**os.environ, "TRAINTEAM_THREADS": THREADS, "PYDANTIC_AI_NO_BANNER": "1"}
QUESTION = "What is {a} plus {b}? Answer with the number only."


def _chat_rows(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = rng.randint(10, 49), rng.randint(10, 49)
        rows.append({"id": f"s{seed}-{i}", "messages": [{"role": "user", "content": QUESTION.format(a=a, b=b)},
                                                        {"role": "assistant", "content": str(a + b)}]})
    return rows


def _write_parquet(rows: list[dict], path: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _run(args: list[str], cwd: Path, timeout: int = 1200) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + args, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


def _execute(tmp: Path, task: dict) -> dict:
    (tmp / "task.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    proc = _run(["execute-workflow", "train_model", "--task", "task.yaml", "--yes", "--json"], tmp)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return json.loads(proc.stdout[proc.stdout.index("{"):])


def _registered(tmp: Path) -> dict:
    proc = _run(["models", "list", "--json"], tmp, timeout=600)
    assert proc.returncode == 0, proc.stderr
    (record,) = json.loads(proc.stdout)
    return record


@pytest.fixture(scope="module")
def sft_run(real_model, tmp_path_factory):
    """LoRA SFT, then three LoRA DPO steps (pairs from the model's own answers), of the real model on
    160 chat rows in Parquet, TRL key names, no curation settings."""
    tmp = tmp_path_factory.mktemp("real-sft")
    _write_parquet(_chat_rows(160, seed=1), tmp / "train.parquet")
    _write_parquet(_chat_rows(16, seed=2), tmp / "eval.parquet")
    task = {
        "name": "smol-sums", "model": {"path": str(real_model)},
        "data": {"path": "train.parquet", "eval_path": "eval.parquet"},
        "stages": ["sft", "dpo"],
        "training": {"sft": {"max_steps": 16, "per_device_train_batch_size": 8, "learning_rate": 1e-3,
                             "max_length": 96, "use_peft": True, "lora_r": 8, "lora_alpha": 16},
                     "dpo": {"max_steps": 3, "per_device_train_batch_size": 4, "learning_rate": 5e-6,
                             "max_length": 96, "use_peft": True}},
        "gates": {"sft": {"metric": "exact_match", "min": 0.1}},
        "eval": {"max_new_tokens": 6, "batch_size": 16},
        "budget": {"max_wall_minutes": 30},
    }
    return tmp, _execute(tmp, task)


def test_the_base_model_does_not_answer_and_sft_makes_it(sft_run, real_model):
    """Held-out exact match before (the base model explains instead of answering) and after."""
    from trainteam.trainers.evaluation.battery import exact_match
    from trainteam.trainers.training.tokenizer import load_tokenizer

    tmp, run = sft_run
    assert run["status"] == "completed", run
    eval_rows = _chat_rows(16, seed=2)
    before = exact_match(real_model, load_tokenizer(real_model), eval_rows, max_new_tokens=6, batch_size=16)
    after = run["metrics"]["final_eval.exact_match"]
    assert before.accuracy <= 0.1 and after >= before.accuracy + 0.2, (before.accuracy, after)
    assert run["metrics"]["curate.curation.output"] >= 150  # the user's short chat rows are kept by default


def test_the_registered_model_loads_in_plain_transformers_and_is_served_as_evaluated(sft_run):
    """The registered folder reloads with plain transformers (safetensors only); ``trainteam serve``
    builds the prompt the judge evaluated (same tokens) and gives the answer it scored."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trainteam.trainers.evaluation.battery import exact_match

    tmp, run = sft_run
    record = _registered(tmp)
    model_id = record["id"]
    assert record["lineage"]["prompt_format"] == "chat"
    folder = Path(record["path"])
    assert not list(folder.glob("*.bin")) and list(folder.glob("*.safetensors"))
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.num_parameters() > 100_000_000 and tok.chat_template

    evaluated = exact_match(folder, tok, _chat_rows(16, seed=2), max_new_tokens=6, batch_size=16)
    assert evaluated.accuracy == run["metrics"]["final_eval.exact_match"]  # the registered weights, as judged
    port = _free_port()
    server = subprocess.Popen(CLI + ["serve", model_id, "--port", str(port)], cwd=tmp, env=ENV,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for(port, server)
        from openai import OpenAI

        client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0, timeout=600)
        for sample in evaluated.samples[:3]:
            messages = [{"role": "user", "content": sample["prompt"][-1]["content"]}]
            resp = client.chat.completions.create(model=model_id, messages=messages, temperature=0, max_tokens=6)
            assert resp.usage.prompt_tokens == len(F.prompt_ids(tok, messages, "chat"))
            assert resp.choices[0].message.content.strip() == sample["got"]
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_registered_model_goes_home_as_an_ollama_folder_read_back(sft_run, tmp_path):
    """`models export`: an Ollama folder (GGUF f16 + Modelfile) of the registered model, read back against it on the
    run's held-out rows (exact match within 0.02, identical tokenizer ids, every answer stopping at end-of-turn) and
    recorded: `models show` lists it. (The hf format: tests/export/test_hf_export.py.)"""
    tmp, run = sft_run
    model_id = _registered(tmp)["id"]
    results = {}
    for fmt in ("ollama",):
        proc = _run(["models", "export", model_id, "--format", fmt, "--out", str(tmp_path / fmt), "--json"], tmp)
        assert proc.returncode == 0, proc.stderr[-3000:]
        results[fmt] = result = json.loads(proc.stdout)
        answers, tokens = result["check"]["answers"], result["check"]["tokenizer"]
        assert answers["metric"] == "exact_match" and answers["rows"] == 16
        assert abs(answers["exported"] - answers["registered"]) <= 0.02
        assert answers["registered"] == run["metrics"]["final_eval.exact_match"]  # the rows the judge scored
        assert answers["stops_exported"] == answers["rows"]
        assert tokens["identical_ids"] == tokens["round_trips"] == tokens["texts"] == 16
    ollama = tmp_path / "ollama"
    gguf_name = results["ollama"]["artifact"]
    modelfile = (ollama / "Modelfile").read_text()
    assert f"FROM ./{gguf_name}" in modelfile and 'PARAMETER stop "<|im_end|>"' in modelfile
    assert "20 of 20" in results["ollama"]["check"]["template"]
    assert sorted(p.name for p in ollama.iterdir()) == sorted(["Modelfile", gguf_name])
    shown = json.loads(_run(["models", "show", model_id, "--json"], tmp).stdout)
    assert [e["format"] for e in shown["exports"]] == ["ollama"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(port: int, proc: subprocess.Popen, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"trainteam serve exited {proc.returncode}: {proc.stdout.read()[-2000:]}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.5)
    raise AssertionError("trainteam serve did not listen")


def test_dpo_trained_the_real_model_on_pairs_of_its_own_chat_answers(sft_run):
    _, run = sft_run
    steps = {s["name"]: s["status"] for s in run["steps"]}
    assert steps["align"] == "completed" and steps["register_model"] == "completed", steps
    assert run["metrics"]["align.dpo.steps"] == 3 and math.isfinite(run["metrics"]["align.dpo.final_loss"])


def test_grpo_trains_the_real_model_on_chat_rows(sft_run, tmp_path):
    """GRPO (rewards from the task's answer rule on chat completions) through the workflow, from the
    first run's registered model."""
    method = "grpo"
    tmp, _ = sft_run
    folder = _registered(tmp)["path"]
    _write_parquet(_chat_rows(48, seed=3), tmp_path / "train.parquet")
    _write_parquet(_chat_rows(8, seed=4), tmp_path / "eval.parquet")
    align = {"max_steps": 3, "per_device_train_batch_size": 4, "learning_rate": 5e-6, "max_length": 96,
             "use_peft": True}  # a LoRA adapter: DPO's reference is the base with it switched off
    align.update(num_generations=4, max_completion_length=6)
    battery = {"metrics": ["exact_match"], "max_new_tokens": 6, "batch_size": 8}  # the judge's cheapest check
    task = {
        "name": f"smol-{method}", "model": {"path": folder},
        "data": {"path": "train.parquet", "eval_path": "eval.parquet"},
        "curriculum": [
            {"name": "sft", "training": {"max_steps": 1, "per_device_train_batch_size": 4, "learning_rate": 1e-5,
                                         "max_length": 96, "use_peft": True}, "battery": battery,
             "gates": {"metric": "exact_match", "min": 0.0}},  # one step at 1e-5: this test is about the align stage
            {"name": method, "training": align, "battery": battery}],
        "eval": {"max_new_tokens": 6, "batch_size": 8},
        "budget": {"max_wall_minutes": 30},
    }
    out = _execute(tmp_path, task)
    assert out["status"] == "completed", out
    steps = {s["name"]: s["status"] for s in out["steps"]}
    assert steps["align"] == "completed" and steps["register_model"] == "completed", steps
    assert out["metrics"][f"align.{method}.steps"] == 3
    assert math.isfinite(out["metrics"][f"align.{method}.final_loss"])
    assert 0.0 <= out["metrics"]["final_eval.exact_match"] <= 1.0
