"""A new user's first run: the real instruct model plus their own short chat rows, in each file format.

For each format (JSONL, JSON, CSV, Parquet, a ``datasets`` saved folder) the same 150 chat rows
(``tests/instruction_rows.py``: capitals, opposites, plurals, French words, spelling backwards,
sums) and 30 held-out ones are written as a user would hold them, and one task with TRL's key
names and no curation settings runs through ``trainteam execute-workflow --yes`` (a real
subprocess). Reports per format: exit code, wall time, rows kept by curation, held-out exact
match of the base model and of the registered one, and what each step said.

    python benchmarks/user_data_trial.py [--formats jsonl,parquet] [--steps 30] [--model DIR]

Ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from instruction_rows import as_chat, instruction_rows  # noqa: E402
from real_model import ensure_real_model  # noqa: E402

FORMATS = ("jsonl", "json", "csv", "parquet", "saved")


def write(rows: list[dict], fmt: str, stem: Path) -> Path:
    """The rows as a user would hold them in ``fmt`` (a CSV cell holds the turns as JSON text)."""
    if fmt == "jsonl":
        path = stem.with_suffix(".jsonl")
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif fmt == "json":
        path = stem.with_suffix(".json")
        path.write_text(json.dumps(rows))
    elif fmt == "csv":
        import csv

        path = stem.with_suffix(".csv")
        with path.open("w", newline="") as fh:
            out = csv.DictWriter(fh, fieldnames=["id", "messages"])
            out.writeheader()
            out.writerows({"id": r["id"], "messages": json.dumps(r["messages"])} for r in rows)
    elif fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        path = stem.with_suffix(".parquet")
        pq.write_table(pa.Table.from_pylist(rows), path)
    else:
        from datasets import Dataset

        path = stem.with_name(stem.name + "_saved")
        Dataset.from_list(rows).save_to_disk(str(path))
    return path


def base_exact_match(model: Path, rows: list[dict]) -> float:
    from trainteam.curation.answers import default_answer
    from trainteam.trainers.evaluation.battery import exact_match
    from trainteam.trainers.training.tokenizer import load_tokenizer

    return exact_match(model, load_tokenizer(model), rows, max_new_tokens=16, batch_size=30,
                       answer=default_answer(demo=False)).accuracy


def trial(fmt: str, model: Path, steps: int, work: Path) -> dict:
    folder = work / fmt
    folder.mkdir()
    train = write(as_chat(instruction_rows(150)), fmt, folder / "train")
    held = write(as_chat(instruction_rows(30, start=150)), fmt, folder / "eval")
    task = {"name": f"my-rows-{fmt}", "model": {"path": str(model)},
            "data": {"path": train.name, "eval_path": held.name}, "stages": ["sft"],
            "training": {"sft": {"max_steps": steps, "per_device_train_batch_size": 8,
                                 "gradient_accumulation_steps": 1, "learning_rate": 1e-3, "max_length": 128,
                                 "lr_scheduler_type": "cosine", "use_peft": True, "lora_r": 16, "lora_alpha": 32}},
            "gates": {"sft": {"metric": "exact_match", "min": 0.0}},
            "eval": {"max_new_tokens": 16},
            "budget": {"max_wall_minutes": 60}}
    (folder / "task.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "trainteam.cli", "execute-workflow", "train_model", "--task",
                           "task.yaml", "--yes", "--json"], cwd=folder, capture_output=True, text=True,
                          env={**os.environ, "PYDANTIC_AI_NO_BANNER": "1"})
    wall = time.monotonic() - started
    out = {"format": fmt, "exit": proc.returncode, "wall_s": round(wall, 1)}
    if proc.returncode != 0:
        out["error"] = (proc.stderr.strip().splitlines() or ["?"])[-1][:300]
        return out
    run = json.loads(proc.stdout[proc.stdout.index("{"):])
    m = run["metrics"]
    out.update(status=run["status"], kept=m.get("curate.curation.output"), of=m.get("curate.curation.input"),
               exact_match=m.get("final_eval.exact_match"), final_loss=m.get("train.sft.final_loss"),
               steps=[s["name"] + ":" + s["status"] for s in run["steps"]])
    progress = [line.strip() for line in proc.stderr.splitlines() if line.strip().startswith(("✓", "✗", "·"))]
    out["said"] = progress
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--formats", default=",".join(FORMATS))
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--model", type=Path, default=None)
    args = ap.parse_args()
    model = args.model or ensure_real_model()
    base = base_exact_match(model, as_chat(instruction_rows(30, start=150)))
    print(f"base model held-out exact match: {base:.3f}  (load {os.getloadavg()[0]:.1f})", flush=True)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for fmt in args.formats.split(","):
            res = trial(fmt, model, args.steps, Path(tmp))
            results.append(res)
            print(json.dumps(res, indent=1), flush=True)
    print("RESULT " + json.dumps({"base_exact_match": base, "load": os.getloadavg()[0], "trials": [
        {k: r.get(k) for k in ("format", "exit", "status", "kept", "of", "exact_match", "wall_s")} for r in results]}))


if __name__ == "__main__":
    main()
