"""A probe scores the model it is training; on a bf16 base that model generates in bf16. torch 2.13's ``linear``
on a strided bf16 input (the last position generation slices out of the hidden states) materialises the LM head's
weight once per row: 40 rows of SmolLM2's 49k x 576 head added 2.1 GB to the peak for 4 MB of logits, more than
the training step itself. ``bf16_base.frozen_in_bf16`` gives the head a contiguous input; measured in a fresh
process, so that the peak is this generation's own."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CHILD = """
import json, resource, sys
sys.path.insert(0, {tests!r})
import torch
torch.set_num_threads(1)
from chat_tasks import chat_rows
from peft import LoraConfig, get_peft_model
from trainteam.curation.formats import query
from trainteam.trainers.evaluation.battery import greedy_generations
from trainteam.trainers.training.bf16_base import frozen_in_bf16
from trainteam.trainers.training.config import LoraOptions, TrainConfig
from trainteam.trainers.training.models import load_model
from trainteam.trainers.training.tokenizer import load_tokenizer
peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss >> 10
model, tok = load_model({folder!r}), load_tokenizer({folder!r})
model = frozen_in_bf16(model, TrainConfig(precision="bf16", lora=LoraOptions()))
model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"))
prompts = [query(r) for r in chat_rows("dates", 0, 40, seed=0)[1]]
before = peak()
gens = greedy_generations(model, tok, prompts, max_new_tokens=2, batch_size=40)
print(json.dumps({{"before": before, "after": peak(), "n": len(gens), "dtype": str(model.lm_head.weight.dtype)}}))
"""


def test_a_bf16_model_generates_a_batch_without_a_copy_of_its_head_per_row(real_model):
    code = CHILD.format(tests=str(TESTS), folder=str(real_model))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["n"] == 40 and got["dtype"] == "torch.bfloat16"
    assert got["after"] - got["before"] < 300, got  # MiB; a head copy per row is +2,100
