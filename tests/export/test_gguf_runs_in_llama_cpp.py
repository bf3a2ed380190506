"""The exported GGUF in llama.cpp itself: the real SmolLM2 written as f16, run by llama.cpp's ``llama-simple`` (greedy,
until an end-of-generation token) and tokenized by ``llama-tokenize``, against the same file in transformers.

Measured when written: the token ids identical on every prompt, 8 of 8 answers identical, the stops alike. In q8_0
6 of 8 answers were identical (the tokens and stops still all alike): llama.cpp also quantizes the activations of a
q8_0 matmul, and the untrained base model's year digits are near ties that tip either way.

Slow: llama.cpp is built from the registry's llama-cpp-python source the first time (about 7 CPU-minutes; no wheel
of llama.cpp installs on this platform, see ``tests/llama_cpp_source.py``), which does not fit the default suite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from llama_cpp_source import llama_cpp_tools

from trainteam.trainers.export.gguf_writer import write_gguf

sys.path.insert(0, str(Path(__file__).parents[1]))
from chat_tasks import chat_rows  # noqa: E402

pytestmark = pytest.mark.slow
NEW_TOKENS = 48


def test_llama_cpp_tokenizes_and_answers_as_transformers_does(real_model, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tools = llama_cpp_tools()
    gguf = write_gguf(real_model, tmp_path / "smol-f16.gguf", "f16", name="smol", eot_ids=(2,)).path
    tokenizer = AutoTokenizer.from_pretrained(real_model)
    # the same weights llama.cpp runs, dequantized by transformers' GGUF reader: what differs is the runtime alone
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    _, rows = chat_rows("dates", 0, 8, seed=3)
    same = stops_agree = 0
    for row in rows:
        prompt = tokenizer.apply_chat_template(row["messages"][:-1], add_generation_prompt=True, tokenize=False)
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        out = subprocess.run(
            [str(tools["tokenize"]), "-m", str(gguf), "-p", prompt, "--ids", "--log-disable"],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        assert eval(out.stdout.strip().splitlines()[-1]) == ids  # noqa: S307 (a list of ints llama.cpp printed)
        ran = subprocess.run(
            [str(tools["simple"]), "-m", str(gguf), "-n", str(NEW_TOKENS), prompt],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        theirs = ran.stdout.removeprefix(prompt).strip()
        they_stopped = int(ran.stderr.split("main: decoded ")[1].split()[0]) < NEW_TOKENS
        gen = model.generate(
            **tokenizer(prompt, return_tensors="pt", add_special_tokens=False),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
        )[0][len(ids) :].tolist()
        ours = tokenizer.decode(gen, skip_special_tokens=True).strip()
        same += ours == theirs
        stops_agree += they_stopped == (tokenizer.eos_token_id in gen)
    # at most one greedy path may part (the runtimes round differently); both stop at <|im_end|> alike
    assert same >= len(rows) - 1 and stops_agree >= len(rows) - 1, (same, stops_agree)
