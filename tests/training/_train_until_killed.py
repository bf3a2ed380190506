"""Subprocess body for the kill -9 test: train, report each step, hang at a given step."""

import json
import sys
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from trainteam.trainers import ModelSpec, TrainConfig, build_model, load_tokenizer, train

tok_dir, data, out, hang_at = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
torch.set_num_threads(1)


class Beacon(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        Path(out, "beacon").write_text(json.dumps({"step": state.global_step}))

    def on_save(self, args, state, control, **kw):
        if state.global_step >= hang_at:
            Path(out, "hanging").write_text(str(state.global_step))
            time.sleep(600)  # the test kills us here, after this checkpoint is complete


tok = load_tokenizer(Path(tok_dir))
model = build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128), tok)
cfg = TrainConfig(
    output_dir=Path(out),
    max_steps=16,
    per_device_batch_size=8,
    learning_rate=3e-3,
    seq_len=32,
    save_steps=4,
    save_total_limit=5,
)
train("pretrain", cfg, model, Path(data), tokenizer=tok, callbacks=[Beacon()], progress=False)
