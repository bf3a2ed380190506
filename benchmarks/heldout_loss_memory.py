"""Held-out loss on 64 chat rows: the full logits of one 64-row batch (before issue 39) against the LM head on the
answers only in batches of at most ``LOSS_TOKENS`` positions (``battery.labelled_loss``, ``_loss_batches``), each
side in a process of its own, peak RSS and seconds side by side.

    python benchmarks/heldout_loss_memory.py [--model smollm2|gemma] [--task reply] [--rounds 2] [--threads 2]

The real SmolLM2-135M-Instruct (49k vocabulary) or the imported Gemma 3 270M base (262k) of the tests' cache,
64 held-out rows of a chat task in one batch (the battery's), rounds interleaved (ABBA), medians and the load. The
two losses are checked equal (relative 1e-5). Peak RSS is the child's ``ru_maxrss`` less its RSS once the model is
loaded: what scoring adds. Ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))


def child(side: str, model_name: str, task: str, threads: int) -> None:
    """One side, in this process: prints one JSON line (loss, tokens, seconds, MB added at the peak)."""
    import torch

    torch.set_num_threads(threads)
    from trainteam.trainers.evaluation import battery
    from trainteam.trainers.training.models import load_model
    from trainteam.trainers.training.tokenizer import load_tokenizer

    folder = _folder(model_name)
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    rows = _rows(task)
    loaded = _rss_mb()
    if side == "full":  # what heldout_loss did before: the whole logits, of 64 rows in one forward
        battery._decoder_and_head = lambda _model: None
        battery.LOSS_TOKENS = 1 << 40
    started = time.perf_counter()
    loss = battery.heldout_loss(model, tokenizer, rows, batch_size=64)
    seconds = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"loss": loss, "seconds": seconds, "added_mb": round(peak - loaded), "peak_mb": round(peak)}))


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _folder(name: str) -> Path:
    if name == "gemma":
        from gemma_model import ensure_gemma_model

        return ensure_gemma_model()
    from real_model import ensure_real_model

    return ensure_real_model()


def _rows(task: str) -> list[dict]:
    from chat_tasks import chat_rows
    from freeform_tasks import FREEFORM_TASKS, freeform_rows

    if task in FREEFORM_TASKS:
        return freeform_rows(task, 0, 64, seed=0)[1]
    return chat_rows(task, 0, 64, seed=0)[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2", choices=("smollm2", "gemma"))
    ap.add_argument("--task", default="reply")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--side", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.side:
        return child(a.side, a.model, a.task, a.threads)
    runs: dict[str, list[dict]] = {"full": [], "answers": []}
    loads = [round(os.getloadavg()[0], 2)]
    for i in range(a.rounds):
        for side in ("full", "answers") if i % 2 == 0 else ("answers", "full"):
            out = subprocess.run([sys.executable, __file__, "--side", side, "--model", a.model, "--task", a.task,
                                  "--threads", str(a.threads)], capture_output=True, text=True, check=True)
            runs[side].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"round {i}: {side} {runs[side][-1]}", flush=True)
            loads.append(round(os.getloadavg()[0], 2))
    med = {s: {k: statistics.median(r[k] for r in rs) for k in ("seconds", "added_mb", "peak_mb")}
           for s, rs in runs.items()}
    equal = abs(runs["full"][0]["loss"] - runs["answers"][0]["loss"]) <= 1e-5 * abs(runs["full"][0]["loss"])
    result = {"model": a.model, "task": a.task, "rows": 64, "median": med, "losses_equal": equal,
              "memory_ratio_answers_over_full": round(med["answers"]["added_mb"] / max(med["full"]["added_mb"], 1), 3),
              "time_ratio_answers_over_full": round(med["answers"]["seconds"] / med["full"]["seconds"], 3),
              "loss": runs["answers"][0]["loss"], "threads": a.threads, "load": loads}
    print(f"{a.model} {a.task}: scoring adds {med['full']['added_mb']:.0f} MB with the full logits, "
          f"{med['answers']['added_mb']:.0f} MB on the answers; {med['full']['seconds']:.1f} s vs "
          f"{med['answers']['seconds']:.1f} s; losses equal: {equal}; load {loads}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
