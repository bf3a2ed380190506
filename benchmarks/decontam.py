"""Decontamination throughput and recall: trainteam vs a plain-Python n-gram set lookup.

The corpus is the demo corpus (English-like documents, ~1 KB) with 2 % extra
documents that carry an eval example (a reading passage or an addition problem).
The baseline is the textbook implementation (as in GPT-3 / lm-eval-harness
decontamination): a Python set of the eval sets' 13-gram tuples (whole sequence
for shorter examples), every document's n-grams looked up one by one.
Prints MB/s side by side, the ratio, recall of the injected leaks, and one RESULT line.
"""

from __future__ import annotations

import argparse
import json
import re
import time

from trainteam.curation.decontam import DecontamConfig, EvalIndex, decontaminate, eval_text
from trainteam.curation.synthetic import DemoCorpusConfig, demo_eval_sets, iter_demo_corpus

WORD = re.compile(r"(?:[0-9a-z_]|[^\x00-\x7f])+")


def baseline(records: list[dict], eval_sets: dict[str, list[dict]], n: int = 13, min_words: int = 3) -> list[set[str]]:
    grams: dict[int, dict[tuple, str]] = {}
    for name, exs in eval_sets.items():
        for ex in exs:
            words = WORD.findall(eval_text(ex).lower())
            if len(words) < min_words:
                continue
            k = min(n, len(words))
            for i in range(len(words) - k + 1):
                grams.setdefault(k, {})[tuple(words[i : i + k])] = f"{name}/{ex['id']}"
    out = []
    for rec in records:
        words = WORD.findall(rec["text"].lower())
        hits = set()
        for k, table in grams.items():
            for i in range(len(words) - k + 1):
                owner = table.get(tuple(words[i : i + k]))
                if owner:
                    hits.add(owner)
        out.append(hits)
    return out


def ours(records: list[dict], index: EvalIndex, batch: int = 2000) -> list[set[str]]:
    out = []
    for s in range(0, len(records), batch):
        out.extend(o.leaked for o in decontaminate(records[s : s + batch], index))
    return out


def recall(records: list[dict], found: list[set[str]]) -> tuple[float, int]:
    leaks = [(r["meta"]["leak_of"], f) for r, f in zip(records, found, strict=True) if "leak_of" in r["meta"]]
    return sum(1 for want, got in leaks if want in got) / max(1, len(leaks)), len(leaks)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20000)
    args = ap.parse_args()
    cfg = DemoCorpusConfig(n_docs=args.docs, leak_fraction=0.02, junk_fraction=0.0, seed=2)
    evals = demo_eval_sets(cfg)
    records = list(iter_demo_corpus(cfg, evals))
    mb = sum(len(r["text"].encode()) for r in records) / 1e6
    print(f"{len(records)} docs, {mb:.1f} MB; eval sets: " + ", ".join(f"{k} ({len(v)})" for k, v in evals.items()))

    t0 = time.perf_counter()
    base_found = baseline(records, evals)
    t_base = time.perf_counter() - t0
    t0 = time.perf_counter()
    index = EvalIndex.build(evals, DecontamConfig())
    our_found = ours(records, index)
    t_ours = time.perf_counter() - t0

    r_base, n_leaks = recall(records, base_found)
    r_ours, _ = recall(records, our_found)
    false_ours = sum(1 for r, f in zip(records, our_found, strict=True) if f and "leak_of" not in r["meta"])
    agree = sum(1 for a, b in zip(base_found, our_found, strict=True) if a == b) / len(records)
    print(f"  baseline   {t_base:6.2f} s  {mb / t_base:6.2f} MB/s  recall {r_base:.4f}")
    print(
        f"  trainteam  {t_ours:6.2f} s  {mb / t_ours:6.2f} MB/s  recall {r_ours:.4f}  (includes cutting the leaks out)"
    )
    print(
        f"  trainteam / baseline: {t_base / t_ours:.1f}x MB/s; {n_leaks} injected leaks; "
        f"{false_ours} flags on clean docs; per-doc agreement with baseline {agree:.4f}"
    )
    print(
        "RESULT "
        + json.dumps(
            {
                "benchmark": "decontam",
                "docs": len(records),
                "mb": round(mb, 1),
                "injected_leaks": n_leaks,
                "baseline": {"mb_per_s": round(mb / t_base, 2), "recall": round(r_base, 4)},
                "trainteam": {"mb_per_s": round(mb / t_ours, 2), "recall": round(r_ours, 4), "false_flags": false_ours},
                "speedup": round(t_base / t_ours, 2),
                "goal_met": r_ours == 1.0,
            }
        )
    )


if __name__ == "__main__":
    main()
