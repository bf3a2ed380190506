"""An evaluation of 60 held-out chat rows on the real SmolLM2 — the held-out loss and the battery's greedy
generation — before issue 39 against now. Before: the loss from the full logits of 32-row batches, and three
generation passes (the answers, the reliability checks' longer answers, a determinism pass over every row in
smaller batches). Now: the loss through the LM head on the answers only in batches of at most 2,048 positions,
one generation at the longer length cut for the answers, determinism on 16 rows checked in one teacher-forced pass
(``greedy_agreement``: every answer position's most likely token is the answer's) instead of decoded again.

    python benchmarks/battery_generation.py [--task reply] [--rounds 2] [--threads 2]

The same model, rows and lengths for both sides (the post-train battery: answers at the task's answer length,
repetition at 32 tokens, batch 64), rounds interleaved (ABBA), medians and the load. The answers both sides score
are checked identical, the losses equal. Ends with one line ``RESULT {json}``.
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
    ap.add_argument("--task", default="reply")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import torch
    from chat_tasks import chat_rows
    from freeform_tasks import FREEFORM_TASKS, freeform_rows
    from real_model import ensure_real_model

    from trainteam.curation.formats import query
    from trainteam.trainers.evaluation import battery
    from trainteam.trainers.evaluation.answer_length import size_generation
    from trainteam.trainers.evaluation.battery import (
        DETERMINISM_PROMPTS,
        cut_answer,
        greedy_agreement,
        greedy_generations,
    )
    from trainteam.trainers.training.models import load_model
    from trainteam.trainers.training.tokenizer import load_tokenizer

    torch.set_num_threads(a.threads)
    folder = ensure_real_model()
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    rows = freeform_rows(a.task, 0, 60, seed=0)[1] if a.task in FREEFORM_TASKS else chat_rows(a.task, 0, 60, seed=0)[1]
    split, tokens = battery._decoder_and_head, battery.LOSS_TOKENS
    losses: dict[str, float] = {}
    agreed: dict[str, float] = {}
    prompts = [query(r) for r in rows]
    n = size_generation(tokenizer, rows).tokens
    budget, batch = max(n, 32), 64

    def before() -> list[dict]:
        battery._decoder_and_head, battery.LOSS_TOKENS = (lambda _model: None), 1 << 40  # full logits, 32 rows
        try:
            losses["before"] = battery.heldout_loss(model, tokenizer, rows, batch_size=32)
        finally:
            battery._decoder_and_head, battery.LOSS_TOKENS = split, tokens
        answers = greedy_generations(model, tokenizer, prompts, max_new_tokens=n, batch_size=batch)
        greedy_generations(model, tokenizer, prompts, max_new_tokens=budget, batch_size=batch)
        greedy_generations(model, tokenizer, prompts, max_new_tokens=budget, batch_size=batch // 3)
        return answers

    def now() -> list[dict]:
        losses["now"] = battery.heldout_loss(model, tokenizer, rows, batch_size=32)
        longer = greedy_generations(model, tokenizer, prompts, max_new_tokens=budget, batch_size=batch)
        few = prompts[:DETERMINISM_PROMPTS]
        agreed["now"] = greedy_agreement(model, tokenizer, few, longer[: len(few)])
        return [cut_answer(g, n, tokenizer) for g in longer]

    sides = {"before": before, "now": now}
    times: dict[str, list[float]] = {k: [] for k in sides}
    answers: dict[str, list[dict]] = {}
    for i in range(a.rounds):
        for name in ("before", "now") if i % 2 == 0 else ("now", "before"):
            started = time.perf_counter()
            answers[name] = sides[name]()
            times[name].append(time.perf_counter() - started)
            print(f"round {i}: {name} {times[name][-1]:.1f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    same = answers["before"] == answers["now"] and abs(losses["before"] - losses["now"]) <= 1e-5 * losses["now"]
    print(f"answer length {n}, longer {budget}; before {med['before']:.1f} s, now {med['now']:.1f} s: "
          f"{med['before'] / med['now']:.2f}x; answers identical, losses equal: {same}; load {os.getloadavg()[0]:.2f}")
    print("RESULT " + json.dumps({"median_s": {k: round(v, 2) for k, v in med.items()},
                                  "speedup": round(med["before"] / med["now"], 2), "answers_identical": same,
                                  "determinism_now": agreed.get("now"),
                                  "rows": len(rows), "answer_tokens": n, "threads": a.threads,
                                  "load": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
    main()
