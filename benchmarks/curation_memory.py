"""Memory of streaming curation: a ~1 GB generated corpus through curate() under 1 GB RSS.

Side by side in one run, each in its own process so peak RSS is its own:
- trainteam: ``curate(path, eval_sets, out_dir=...)`` streaming the file (spill + band keys);
- baseline: holding the same corpus in memory as records (``read_jsonl``), the least any
  load-then-process pipeline needs before doing any work.
Prints peak RSS of both, the ratio, throughput, and one RESULT line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CHILD_CURATE = """
import json, resource, sys, time
from trainteam.curation.pipeline import curate
from trainteam.curation.jsonl import read_jsonl
corpus, evals_dir, out = sys.argv[1], sys.argv[2], sys.argv[3]
evals = {"passages": f"{evals_dir}/passages.jsonl", "addition": f"{evals_dir}/addition.jsonl"}
t0 = time.perf_counter()
report = curate(corpus, evals, out_dir=out, progress=False)
print(json.dumps({"seconds": time.perf_counter() - t0,
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "counts": report.counts, "injected": {k: v.model_dump() for k, v in report.injected.items()}}))
"""

CHILD_BASELINE = """
import json, resource, sys, time
from trainteam.curation.jsonl import read_jsonl
t0 = time.perf_counter()
records = read_jsonl(sys.argv[1])
print(json.dumps({"seconds": time.perf_counter() - t0, "records": len(records),
                  "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def generate(folder: Path, target_mb: float) -> tuple[Path, int]:
    from trainteam.curation.jsonl import write_jsonl
    from trainteam.curation.synthetic import DemoCorpusConfig, demo_eval_sets, iter_demo_corpus

    n_docs = int(target_mb * 1e6 / 1130)  # ~1.13 KB a JSON line, injected documents included
    cfg = DemoCorpusConfig(n_docs=n_docs, seed=7)
    evals = demo_eval_sets(cfg)
    for name, exs in evals.items():
        write_jsonl(exs, folder / f"{name}.jsonl")
    path = write_jsonl(iter_demo_corpus(cfg, evals), folder / "corpus.jsonl")
    return path, n_docs


def child(code: str, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"child failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=float, default=1024, help="corpus size to generate")
    ap.add_argument("--limit-mb", type=float, default=1024, help="the RSS goal")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="curation-mem-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        corpus, n_docs = generate(folder, args.mb)
        size_mb = corpus.stat().st_size / 2**20
        print(f"generated {size_mb:.0f} MiB ({n_docs} documents + injected) in {time.perf_counter() - t0:.0f} s")
        ours = child(CHILD_CURATE, str(corpus), str(folder), str(folder / "out"))
        base = child(CHILD_BASELINE, str(corpus))
    docs = ours["counts"]["input"]
    print(
        f"  trainteam streaming curate: peak RSS {ours['rss_mb']:7.0f} MiB, {ours['seconds']:.0f} s, "
        f"{docs / ours['seconds']:.0f} docs/s, {size_mb / ours['seconds']:.2f} MiB/s; "
        f"output {ours['counts']['output']} docs"
    )
    print(f"  baseline (corpus held in memory): peak RSS {base['rss_mb']:7.0f} MiB to load {base['records']} records")
    print(f"  RSS ratio trainteam / baseline: {ours['rss_mb'] / base['rss_mb']:.2f}; corpus {size_mb:.0f} MiB")
    for k, v in ours["injected"].items():
        print(f"  injected {k}: caught {v['caught']}/{v['injected']}")
    print(
        "RESULT "
        + json.dumps(
            {
                "benchmark": "curation_memory",
                "corpus_mib": round(size_mb),
                "docs": docs,
                "trainteam": {
                    "peak_rss_mib": round(ours["rss_mb"]),
                    "seconds": round(ours["seconds"], 1),
                    "docs_per_s": round(docs / ours["seconds"]),
                },
                "baseline_in_memory": {"peak_rss_mib": round(base["rss_mb"])},
                "rss_ratio": round(ours["rss_mb"] / base["rss_mb"], 3),
                "goal_met": ours["rss_mb"] < args.limit_mb,
            }
        )
    )


if __name__ == "__main__":
    main()
