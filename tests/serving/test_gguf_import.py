"""`trainteam models import FILE.gguf --out DIR`: the real SmolLM2 GGUF becomes a plain safetensors folder; bad
input is refused with one line and exit 2, writing nothing.

The real import runs once per test cache (the ``real_model`` fixture, tests/real_model.py); these tests read
the folder it made and its JSON report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from real_model import marker

CLI = [sys.executable, "-m", "trainteam.cli"]


def test_imported_folder_is_plain_safetensors_with_its_chat_template(real_model: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    names = {p.name for p in real_model.iterdir()}
    assert "model.safetensors" in names and "chat_template.jinja" in names
    assert not [n for n in names if n.endswith((".bin", ".gguf", ".pt"))]
    config = json.loads((real_model / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    report = json.loads(marker(real_model.parent).read_text())["import"]  # what the CLI printed with --json
    assert report["max_abs_logit_diff"] <= 1e-4 and report["chat_template"] is True
    assert report["folder"] == str(real_model)

    model = AutoModelForCausalLM.from_pretrained(real_model, use_safetensors=True, trust_remote_code=False).eval()
    tokenizer = AutoTokenizer.from_pretrained(real_model)
    assert round(sum(p.numel() for p in model.parameters()) / 1e6, 1) == 134.5 == round(report["parameters"] / 1e6, 1)
    assert "<|im_start|>assistant" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    enc = tokenizer.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}],
                                        add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=12, do_sample=False)
    answer = tokenizer.decode(out[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).strip()
    assert answer and "Paris" in answer


def _import(tmp_path: Path, source: Path, out: Path) -> subprocess.CompletedProcess:
    """A real CLI process (exit code and stderr as a person sees them); it opens no workspace."""
    return subprocess.run([*CLI, "models", "import", str(source), "--out", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)


def _refused(done: subprocess.CompletedProcess, *needles: str, after_progress: bool = False) -> None:
    """Exit 2 with one error line naming the file (after the progress lines, when loading had begun)."""
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == (2 if after_progress else 1), done.stderr
    assert lines[-1].startswith("error:") and all(n in lines[-1] for n in needles), done.stderr
    assert done.stdout == ""


@pytest.mark.parametrize("content", [b"", b"PK\x03\x04 a zip, not a model", b"GGU"])
def test_a_file_that_is_not_gguf_is_refused(tmp_path, content):
    source = tmp_path / "model.gguf"
    source.write_bytes(content)
    _refused(_import(tmp_path, source, tmp_path / "out"), "model.gguf", "not a GGUF file")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf"]  # no out dir, no staging folder


def test_a_missing_file_is_refused(tmp_path):
    _refused(_import(tmp_path, tmp_path / "absent.gguf", tmp_path / "out"), "absent.gguf", "no such file")
    assert list(tmp_path.iterdir()) == []


def test_an_existing_non_empty_out_dir_is_refused_and_left_alone(tmp_path):
    source = tmp_path / "model.gguf"
    source.write_bytes(b"GGUF\x03\x00\x00\x00")
    out = tmp_path / "out"
    out.mkdir()
    (out / "mine.txt").write_text("keep me")
    _refused(_import(tmp_path, source, out), "--out", "not an empty folder")
    assert [p.name for p in out.iterdir()] == ["mine.txt"] and (out / "mine.txt").read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf", "out"]


def test_a_damaged_gguf_fails_in_one_line_and_leaves_no_half_folder(tmp_path):
    """Past the magic bytes: transformers' loader refuses it; the staging folder beside --out is removed."""
    source = tmp_path / "damaged.gguf"
    source.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\x00" * 40)  # a header with no metadata
    _refused(_import(tmp_path, source, tmp_path / "out"), "damaged.gguf", "cannot load this GGUF file",
             after_progress=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["damaged.gguf"]
