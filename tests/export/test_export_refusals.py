"""`trainteam models export` on input it cannot honour: one line naming the problem and the fix, exit 2, nothing
written.

The real CLI in a subprocess, on a workspace whose registry holds the real SmolLM2 (imported, no run), a tiny GPT-2
(an architecture GGUF export does not take), trainteam's tiny llama with its own BPE tokenizer (a pre-tokenizer
llama.cpp does not know) and a registered folder damaged after it was registered. The workspace (every file, every
table) and the working folder are compared before and after each case.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys

import pytest
from hostile_cases import snapshot

CASES = [  # (name, argv after `models export`, the substring the one line holds)
    ("unknown model", ["m-nope", "--format", "gguf", "--out", "{cwd}/out"], "is not registered"),
    ("unknown format", ["smol", "--format", "zip", "--out", "{cwd}/out", "--rows", "{cwd}/rows.jsonl"], "format"),
    ("unknown quant", ["smol", "--format", "gguf", "--quant", "q4", "--out", "{cwd}/out"], "quant"),
    ("--out exists", ["smol", "--format", "gguf", "--out", "{cwd}/exists", "--rows", "{cwd}/rows.jsonl"],
     "already exists"),
    ("--out under a file", ["smol", "--format", "hf", "--out", "{cwd}/afile/out", "--rows", "{cwd}/rows.jsonl"],
     "not a writable folder"),
    ("no run, no rows", ["smol", "--format", "gguf", "--out", "{cwd}/out"], "--rows"),
    ("rows missing", ["smol", "--format", "gguf", "--out", "{cwd}/out", "--rows", "{cwd}/nope.jsonl"], "no such file"),
    ("architecture", ["gpt2tiny", "--format", "gguf", "--out", "{cwd}/out", "--rows", "{cwd}/rows.jsonl"],
     "GPT2LMHeadModel cannot be exported to GGUF"),
    ("pre-tokenizer", ["ownbpe", "--format", "ollama", "--out", "{cwd}/out", "--rows", "{cwd}/rows.jsonl"],
     "pre-tokenizer"),
    ("damaged folder", ["damaged", "--format", "hf", "--out", "{cwd}/out", "--rows", "{cwd}/rows.jsonl"],
     "changed since it was registered"),
]


@pytest.fixture(scope="module")
def refusal_ws(tmp_path_factory, real_model, tiny_checkpoint):
    from transformers import GPT2Config, GPT2LMHeadModel

    from trainteam.trainers.serving.registry import ModelRegistry
    from trainteam.workspace import Workspace

    root = tmp_path_factory.mktemp("export-refusals")
    gpt2 = root / "gpt2tiny"
    GPT2LMHeadModel(GPT2Config(n_embd=16, n_layer=1, n_head=2, vocab_size=64, n_positions=32)).save_pretrained(gpt2)
    shutil.copy(tiny_checkpoint / "tokenizer.json", gpt2 / "tokenizer.json")
    own, damaged = root / "ownbpe", root / "damaged"
    shutil.copytree(tiny_checkpoint, own)
    shutil.copytree(tiny_checkpoint, damaged)
    config = json.loads((damaged / "config.json").read_text())
    (damaged / "config.json").write_text(json.dumps({**config, "name_or_path": "damaged"}))  # its own content hash
    ws = Workspace.open(root / "ws")
    registry = ModelRegistry.of(ws)
    for name, folder in (("smol", real_model), ("gpt2tiny", gpt2), ("ownbpe", own), ("damaged", damaged)):
        registry.register_checkpoint(folder, stage="imported", name=name)
    with (damaged / "model.safetensors").open("r+b") as fh:  # a byte flipped after registering
        fh.seek(-1, os.SEEK_END)
        last = fh.read(1)
        fh.seek(-1, os.SEEK_END)
        fh.write(bytes([last[0] ^ 0xFF]))
    ws.engine.dispose()
    conn = sqlite3.connect(root / "ws" / "trainteam.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    cwd = root / "cwd"
    cwd.mkdir()
    (cwd / "exists").mkdir()
    (cwd / "afile").write_text("a file, not a folder")
    row = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]}
    (cwd / "rows.jsonl").write_text(json.dumps(row) + "\n")
    return root / "ws", cwd


@pytest.mark.parametrize(("name", "argv", "expect"), CASES, ids=[c[0] for c in CASES])
def test_export_refuses_in_one_line_and_writes_nothing(refusal_ws, name, argv, expect):
    ws, cwd = refusal_ws
    before = (snapshot(ws), snapshot(cwd))
    args = [a.replace("{cwd}", str(cwd)) for a in argv]
    env = {**os.environ, "TRAINTEAM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-m", "trainteam.cli", "-w", str(ws), "models", "export", *args],
                          cwd=cwd, capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2, (name, proc.returncode, proc.stderr[-2000:])
    assert len(lines) == 1 and expect in lines[0], (name, lines)
    assert "Traceback" not in proc.stderr
    assert (snapshot(ws), snapshot(cwd)) == before, name
    assert not (cwd / "out").exists() and not [p for p in cwd.iterdir() if p.name.startswith(".")]
