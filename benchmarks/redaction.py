"""The redaction pass on a 1 MB string against the JSON encoding every stored string gets anyway.

``agents.redact.redact_text`` runs on every string the product stores, prints or checkpoints, so it must
stay linear and cheap. Baseline: ``json.dumps`` of the same string (what storing it costs regardless).
Rounds are interleaved (ABBA) on the same text; medians and the 1-minute load average are reported.
Goal: redaction ≤ 25x the JSON encoding, a C loop (measured 16x: 25 ms against 1.6 ms per MB on the 2-core
machine; the suite once asserted 0.5 s, 300x). Ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import time

from trainteam.contract.redaction import redact_text, secret_values

ROUNDS = 12
WORDS = ["run tiny-20261201-101010-ab12, then mytask-20261201-101010-ab12", "loss=0.8213 lr=1e-3 steps=2,000",
         "/work/runs/tiny-20261201-101010-ab12/checkpoint-300/model.safetensors", "the loss fell", "0.8213",
         "api_key=q0123456789abcdef", '"step": "train#1",', "pad_token: <|endoftext|> eos_token=</s>", "\n"]


def megabyte() -> str:
    rng = random.Random(0)
    parts, size = [], 0
    while size < 1_000_000:
        parts.append(rng.choice(WORDS))
        size += len(parts[-1]) + 1
    return " ".join(parts)[:1_000_000]


def timed(fn, *args) -> float:
    t0 = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t0


def main() -> None:
    text, secrets = megabyte(), secret_values()
    redact_s, json_s = [], []
    for i in range(ROUNDS):  # A B B A
        order = [("r", redact_text), ("j", json.dumps)] if i % 2 == 0 else [("j", json.dumps), ("r", redact_text)]
        for name, fn in order:
            seconds = timed(fn, text, secrets) if name == "r" else timed(fn, text)
            (redact_s if name == "r" else json_s).append(seconds)
    r, j = statistics.median(redact_s), statistics.median(json_s)
    result = {"bytes": len(text), "redact_ms": round(r * 1000, 2), "json_dumps_ms": round(j * 1000, 2),
              "ratio": round(r / j, 2), "goal_ratio": 25, "met": r / j <= 25, "rounds": ROUNDS,
              "load_1min": round(os.getloadavg()[0], 2)}
    print(f"redact_text: {result['redact_ms']} ms per MB; json.dumps: {result['json_dumps_ms']} ms; "
          f"ratio {result['ratio']} (goal <= 25), load {result['load_1min']}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
