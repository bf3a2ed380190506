"""Logits only where the loss is: a training step of the real SmolLM2 with TRL's fused LM head scoring every position
(TRL's choice on a CPU) against scoring only the labelled ones (``trainers/training/labelled_logits.py``).

    python benchmarks/labelled_logits.py [--rows 8] [--row-tokens 60] [--answer-tokens 10] [--rounds 3] [--threads 1]

One padding-free batch (rows flattened, position ids restarting), the answer the last tokens of each row; forward and
backward, rounds interleaved (ABBA), medians, the load; both sides' losses printed (they must be equal). Ends with one
line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=8)
    ap.add_argument("--row-tokens", type=int, default=60)
    ap.add_argument("--answer-tokens", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    import torch
    import trl.trainer.utils as fused
    from real_model import ensure_real_model
    from transformers import AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from trainteam.trainers.training.labelled_logits import score_labelled_positions_only

    torch.set_num_threads(a.threads)
    model = AutoModelForCausalLM.from_pretrained(ensure_real_model())
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    n = a.rows * a.row_tokens
    ids = torch.randint(0, model.config.vocab_size, (1, n), generator=torch.Generator().manual_seed(0))
    labels = torch.full_like(ids, -100)
    for r in range(a.rows):
        end = (r + 1) * a.row_tokens
        labels[0, end - a.answer_tokens : end] = ids[0, end - a.answer_tokens : end]
    positions = torch.arange(a.row_tokens).repeat(a.rows)[None]
    trl_choice = fused._use_triton
    score_labelled_positions_only()
    sides = {"every position (TRL on CPU)": trl_choice, "labelled only": fused._use_triton}

    def step(choice) -> tuple[float, float]:
        fused._use_triton = choice
        started = time.perf_counter()
        out = model(input_ids=ids, position_ids=positions, labels=labels, fused_lm_head=True)
        loss = -out.log_probs.sum() / (labels[:, 1:] != -100).sum()
        loss.backward()
        model.zero_grad()
        return time.perf_counter() - started, loss.item()

    step(sides["labelled only"])  # warm-up
    times: dict[str, list[float]] = {k: [] for k in sides}
    losses: dict[str, float] = {}
    names = list(sides)
    for i in range(a.rounds):
        for name in names if i % 2 == 0 else names[::-1]:
            seconds, losses[name] = step(sides[name])
            times[name].append(seconds)
    med = {k: statistics.median(v) for k, v in times.items()}
    for k in names:
        print(f"{k:28s} median {med[k]:.2f} s/step (loss {losses[k]:.6f})")
    ratio = med[names[0]] / med[names[1]]
    print(f"labelled only is {ratio:.2f}x faster; load {[round(x, 2) for x in os.getloadavg()]}")
    print("RESULT " + json.dumps({"median_s": {k: round(v, 3) for k, v in med.items()}, "speedup": round(ratio, 2),
                                  "same_loss": abs(losses[names[0]] - losses[names[1]]) < 1e-5, "threads": a.threads,
                                  "tokens": n, "answer_share": a.answer_tokens / a.row_tokens,
                                  "load": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
