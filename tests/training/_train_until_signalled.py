"""Subprocess body for the SIGTERM test: train slowly, print the TrainReport as JSON."""

import sys
import time
from pathlib import Path

import torch
from transformers import TrainerCallback

from trainteam.trainers import ModelSpec, TrainConfig, build_model, load_tokenizer, train

tok_dir, data, out = sys.argv[1], sys.argv[2], sys.argv[3]
torch.set_num_threads(1)


class Slow(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        Path(out, "beacon").write_text(str(state.global_step))
        time.sleep(0.2)


tok = load_tokenizer(Path(tok_dir))
model = build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128), tok)
cfg = TrainConfig(output_dir=Path(out), max_steps=500, per_device_batch_size=8, seq_len=32, save_steps=100)
rep = train("pretrain", cfg, model, Path(data), tokenizer=tok, callbacks=[Slow()], progress=False)
print("REPORT " + rep.model_dump_json())
