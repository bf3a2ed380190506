"""DDP through the workflow: a 2-process run (``distributed: {strategy: ddp, num_processes: 2}``,
gloo on a CPU) of ``execute-workflow train_model`` against the 1-process run of the same task at
the same global batch (2 x B/2 against 1 x B), side by side in two workspaces.

Same seed, learning rate, steps and data; the ranks see different halves of each global batch
(DistributedSampler), so the curves are not bit-equal: the loss is compared as the mean of the last
``--tail`` logged losses (``loss_rel_diff`` = |ddp - single| / single), and the final loss too.
Throughput is the train step's own telemetry (``train.pretrain.tokens_per_s``: non-padding tokens
over productive step time, summed over ranks) and the train step's wall time, which includes the
launch (two interpreters importing torch/transformers). Threads: by default (``--threads auto``) each
run takes the product's own choice (a single process: the cores the neighbours leave free when it
starts; each rank: cores / ranks); ``--threads N`` fixes the single process at N and each rank at
N / 2, so both use the same cores. The threads each used are in the result. On a shared 2-core
machine the single process at 2 threads was measured ~6x slower than 2 ranks at 1 thread each
(oversubscription; see LIBRARY-NOTES on threads under load), so a ratio far above 2 says more
about the neighbours than about DDP.

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

VENV_BIN = Path(sys.executable).parent


def _task(steps: int, batch: int, distributed: dict | None) -> dict:
    task = {
        "name": "ddpbench",
        "model": {"hidden_size": 128, "num_layers": 2, "num_heads": 4, "max_position_embeddings": 64},
        "data": {"demo": "addition", "n_train": 4000, "n_eval": 32, "max_operand": 99},
        "tokenizer": {"vocab_size": 280},
        "stages": ["pretrain"],
        "training": {"pretrain": {"max_steps": steps, "learning_rate": 1e-3, "warmup_steps": 10,
                                  "per_device_train_batch_size": batch, "max_length": 64,
                                  "save_steps": max(1, steps // 2),
                                  "spike": {"enabled": False}}},
        "gates": {"pretrain": {"metric": "exact_match", "min": 0.0}},
        "budget": {"max_wall_minutes": 30},
    }
    if distributed:
        task["distributed"] = distributed
    return task


def _run(folder: Path, task: dict, threads: int | None) -> dict:
    folder.mkdir(parents=True)
    path = folder / "task.yaml"
    path.write_text(yaml.safe_dump(task))
    ws = folder / "ws"
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINTEAM_THREADS", "OMP_NUM_THREADS")}
    if threads is not None:
        env.update(TRAINTEAM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    t0 = time.perf_counter()
    proc = subprocess.run([str(VENV_BIN / "trainteam"), "-w", str(ws), "execute-workflow", "train_model", "--task",
                           str(path), "--run-id", "bench", "--json", "--yes"], capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"run in {folder} failed ({proc.returncode}): {proc.stderr[-2000:]}")
    view = json.loads(subprocess.run([str(VENV_BIN / "trainteam"), "-w", str(ws), "runs", "show", "bench", "--json"],
                                     capture_output=True, text=True, check=True, env=env).stdout)
    history = [json.loads(line) for line in
               (ws / "checkpoints" / "bench" / "pretrain-v1" / "run-history.jsonl").read_text().splitlines()]
    losses = [h["loss"] for h in history if h.get("event") == "log" and "loss" in h]
    train = next(s for s in view["steps"] if s["name"] == "train")
    m = view["metrics"]
    return {"status": view["status"], "wall_s": round(wall, 1), "train_step_s": train["seconds"],
            "tokens_per_s": m["train.pretrain.tokens_per_s"], "final_loss": losses[-1], "losses": losses,
            "steps": m["train.pretrain.steps"], "threads": m.get("train.pretrain.threads")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--global-batch", type=int, default=32)
    ap.add_argument("--threads", default="auto", help="auto, or the single process's threads (ranks: half each)")
    ap.add_argument("--tail", type=int, default=20)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="tt-ddp-"))
    load0 = os.getloadavg()[0]
    fixed = None if args.threads == "auto" else int(args.threads)
    single = _run(tmp / "single", _task(args.steps, args.global_batch, None), fixed)
    ddp = _run(tmp / "ddp", _task(args.steps, args.global_batch // 2, {"strategy": "ddp", "num_processes": 2}),
               None if fixed is None else max(1, fixed // 2))
    tail = args.tail
    mean = {k: sum(r["losses"][-tail:]) / len(r["losses"][-tail:]) for k, r in (("single", single), ("ddp", ddp))}
    result = {
        "loss_rel_diff": round(abs(mean["ddp"] - mean["single"]) / mean["single"], 4),
        "final_loss_rel_diff": round(abs(ddp["final_loss"] - single["final_loss"]) / single["final_loss"], 4),
        "throughput_ratio": round(ddp["tokens_per_s"] / single["tokens_per_s"], 3),
        "train_step_time_ratio": round(ddp["train_step_s"] / single["train_step_s"], 3),
        "tail_mean_loss": {k: round(v, 4) for k, v in mean.items()},
        "first_loss": {"single": round(single["losses"][0], 4), "ddp": round(ddp["losses"][0], 4)},
        "steps": args.steps, "global_batch": args.global_batch, "threads_asked": args.threads,
        "load_avg_1m": [round(load0, 2), round(os.getloadavg()[0], 2)],
        **{f"{k}_{f}": r[f] for k, r in (("single", single), ("ddp", ddp))
           for f in ("tokens_per_s", "train_step_s", "wall_s", "final_loss", "status", "threads")},
    }
    for k, r in (("single", single), ("ddp", ddp)):
        print(f"{k:6s}: {r['status']}, final loss {r['final_loss']:.4f}, {r['tokens_per_s']:.0f} tokens/s, "
              f"train step {r['train_step_s']:.1f}s, run {r['wall_s']:.1f}s")
    print(f"DDP / single: tokens/s x{result['throughput_ratio']}, train step time x{result['train_step_time_ratio']}, "
          f"loss (mean of last {tail}) differs by {result['loss_rel_diff']:.2%}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
