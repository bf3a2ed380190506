"""An evaluation of 60 held-out chat rows on the real SmolLM2 — the held-out loss and the battery's greedy
generation — before issue 39 against now. Before: the loss from the full logits of 32-row batches, and three
generation passes (the answers, the reliability checks' longer answers, a determinism pass over every row in
smaller batches). Now: the loss through the LM head on the answers only in batches of at most 2,048 positions,
one generation at the longer length cut for the answers, determinism on 16 rows checked in one teacher-forced pass
(``greedy_agreement``: every answer position's most likely token is the answer's) instead of decoded again.

    python benchmarks/battery_generation.py [--task reply] [--rounds 2] [--threads 2]

The same model, rows and lengths for both sides (the post-train battery: answers at the task's answer length,
repetition at 32 tokens, batch 64), rounds interleaved (ABBA), medians and the load. The answers both sides score
are checked identical, the losses equal. A third side, ``now_bf16``, is the same work in bf16
(``eval.precision: bf16``, ``trainers/evaluation/precision.py``): its time, how many answers match fp32's, its
determinism check, and ROUGE-L and exact match against the references at both precisions. Ends with one line
``RESULT {json}``.
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

    from trainteam.curation.formats import example, query
    from trainteam.trainers.evaluation import battery
    from trainteam.trainers.evaluation.answer_length import size_generation
    from trainteam.trainers.evaluation.battery import (
        DETERMINISM_PROMPTS,
        cut_answer,
        greedy_agreement,
        greedy_generations,
    )
    from trainteam.trainers.evaluation.metrics.metric_registry import METRICS
    from trainteam.trainers.evaluation.metrics.metric_spec import AnswerRows
    from trainteam.trainers.evaluation.precision import load_for_eval
    from trainteam.trainers.training.models import load_model
    from trainteam.trainers.training.tokenizer import load_tokenizer

    torch.set_num_threads(a.threads)
    folder = ensure_real_model()
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    bf16_model = load_for_eval(folder, "bf16")
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

    def now(m=model, name="now") -> list[dict]:
        losses[name] = battery.heldout_loss(m, tokenizer, rows, batch_size=32)
        longer = greedy_generations(m, tokenizer, prompts, max_new_tokens=budget, batch_size=batch)
        few = prompts[:DETERMINISM_PROMPTS]
        agreed[name] = greedy_agreement(m, tokenizer, few, longer[: len(few)])
        return [cut_answer(g, n, tokenizer) for g in longer]

    sides = {"before": before, "now": now, "now_bf16": lambda: now(bf16_model, "now_bf16")}
    order = list(sides)
    times: dict[str, list[float]] = {k: [] for k in sides}
    answers: dict[str, list[dict]] = {}
    for i in range(a.rounds):
        for name in order if i % 2 == 0 else order[::-1]:
            started = time.perf_counter()
            answers[name] = sides[name]()
            times[name].append(time.perf_counter() - started)
            print(f"round {i}: {name} {times[name][-1]:.1f} s", flush=True)
    med = {k: statistics.median(v) for k, v in times.items()}
    pairs = AnswerRows.of([example(r) for r in rows])
    rouge = METRICS["rouge_l"].score
    assert rouge is not None
    scores = {
        side: {
            "rouge_l": round(rouge([g["text"] for g in answers[side]], pairs).mean, 4),
            "exact": round(
                sum(g["text"] == ref.strip() for g, ref in zip(answers[side], pairs.references, strict=True))
                / len(rows),
                4,
            ),
        }
        for side in ("now", "now_bf16")
    }
    matching = sum(x["text"] == y["text"] for x, y in zip(answers["now"], answers["now_bf16"], strict=True))
    same = answers["before"] == answers["now"] and abs(losses["before"] - losses["now"]) <= 1e-5 * losses["now"]
    print(
        f"in bf16: {med['now_bf16']:.1f} s ({med['before'] / med['now_bf16']:.2f}x), {matching} of "
        f"{len(rows)} answers as in fp32, scores {scores}"
    )
    print(
        f"answer length {n}, longer {budget}; before {med['before']:.1f} s, now {med['now']:.1f} s: "
        f"{med['before'] / med['now']:.2f}x; answers identical, losses equal: {same}; load {os.getloadavg()[0]:.2f}"
    )
    print(
        "RESULT "
        + json.dumps(
            {
                "median_s": {k: round(v, 2) for k, v in med.items()},
                "speedup": round(med["before"] / med["now"], 2),
                "answers_identical": same,
                "speedup_bf16": round(med["before"] / med["now_bf16"], 2),
                "bf16_answers_as_fp32": matching,
                "scores": scores,
                "loss_fp32": round(losses["now"], 5),
                "loss_bf16": round(losses["now_bf16"], 5),
                "determinism_bf16": agreed.get("now_bf16"),
                "determinism_now": agreed.get("now"),
                "rows": len(rows),
                "answer_tokens": n,
                "threads": a.threads,
                "load": [round(x, 2) for x in os.getloadavg()],
            }
        )
    )


if __name__ == "__main__":
    main()
