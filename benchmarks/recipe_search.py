"""The training engineer's recipe search against a grid trained in full, on bundled tasks of different difficulty.

For each task (2-digit addition and subtraction, 3-digit addition by default) one tiny Llama is
pretrained once (fixed settings, the same start for everyone), then its SFT stage is trained through
``execute-workflow train_model`` (in this process, one workspace):

- the grid: 3 learning rates x 3 step counts, each trained in full (9 runs, ``search: false``);
- the team: the same task with no learning rate (``search: true``, the grid's longest length given as
  ``max_steps``): the engineer's probes (towards that length) pick the rate, and the chosen probe goes on.

Same seeds, batch, data and evaluation (held-out exact match on the task's eval problems). Compute is
SFT optimizer steps, each counted once (the probes' steps counted for the team, the chosen probe's
among them, and the stage's run from where that probe stopped; pretraining is shared and left out);
wall seconds of the train step are shown beside it. Per task and overall:
``fraction_of_grid_best`` = team exact match / the grid's best (goal >= 0.95) and
``fraction_of_grid_compute`` = team steps / the grid's steps (goal <= 0.35).

    python benchmarks/recipe_search.py [--tasks add2,sub2,add3] [--steps 150,300,600] [--jobs 2] [--quick]

Ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

TASKS = {
    "add2": {"demo": "addition", "max_operand": 99},
    "sub2": {"demo": "subtraction", "max_operand": 99},
    "add3": {"demo": "addition", "max_operand": 999},
    "mul2": {"demo": "multiplication", "max_operand": 30},
}
GRID_LRS = (1e-4, 5e-4, 2.5e-3)
MODEL = {"arch": "llama", "hidden_size": 128, "num_layers": 2, "num_heads": 4, "max_position_embeddings": 64}


def _task(name: str, data: dict, stages: list[str], training: dict, **more) -> dict:
    return {
        "name": name,
        "model": more.pop("model", MODEL),
        "data": {**data, "n_train": 8000, "n_eval": 200, "seed": 0},
        "tokenizer": {"vocab_size": 300, "split_digits": True},
        "stages": stages,
        "training": training,
        "budget": {"max_wall_minutes": 60},
        "require_approval": [],
        **more,
    }


def _outputs(ws, run_id: str) -> dict[str, dict]:
    from trainteam.workflows.engine.store import RunStore

    out: dict[str, dict] = {}
    for a in RunStore(ws.engine).attempts(run_id):
        if a.get("output"):
            out[a["step"]] = {**a["output"], "seconds": float(a.get("seconds") or 0)}
    return out


def _run(ws, task: dict) -> dict[str, dict]:
    """One run as a user starts it: ``trainteam execute-workflow --yes --json`` in a subprocess."""
    path = Path(ws.root) / f"{task['name']}.yaml"
    path.write_text(yaml.safe_dump(task))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainteam.cli",
            "-w",
            str(ws.root),
            "execute-workflow",
            "train_model",
            "--task",
            str(path),
            "--yes",
            "--json",
            "--quiet",
        ],
        capture_output=True,
        text=True,
    )
    view = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    out = _outputs(ws, view["run_id"]) if view.get("run_id") else {}
    # a run whose model missed its gate (the default gate: beat the base model beyond noise) was still trained and
    # measured: a grid cell is a measurement, not a promotion
    if view.get("status") != "completed" and not {"train", "evaluate"} <= set(out):
        raise SystemExit(f"{task['name']}: exit {proc.returncode}: {view.get('error') or proc.stderr[-800:]}")
    return out


def pretrained(ws, key: str, data: dict) -> str:
    """One pretraining run (the same start for the grid and the team): its final checkpoint folder."""
    cfg = {
        "max_steps": 300,
        "per_device_train_batch_size": 32,
        "max_length": 64,
        "learning_rate": 1e-3,
        "warmup_steps": 30,
    }
    out = _run(ws, _task(f"{key}-pre", data, ["pretrain"], {"pretrain": cfg}, search=False))
    return out["train"]["artifacts"]["checkpoint"]


def sft_run(ws, name: str, data: dict, base: str, cfg: dict, search: bool) -> dict:
    """One SFT run from ``base``: held-out exact match, steps trained (probes included), train-step seconds."""
    model = {"path": base}
    t0 = time.perf_counter()
    out = _run(ws, _task(name, data, ["sft"], {"sft": cfg}, model=model, search=search))
    train = out["train"]
    found = (train.get("details") or {}).get("search", {}).get("sft")
    probe_steps = sum(p["steps"] for p in found["probes"]) if found else 0
    # the chosen probe's run goes on from its checkpoint: those steps are the probes', counted once
    kept = (found or {}).get("continued_from") or 0
    rates = {p["trial"]: p["learning_rate"] for p in (found or {}).get("probes") or []}
    return {
        "exact_match": out["evaluate"]["metrics"]["exact_match"],
        "steps": int(train["metrics"]["sft.steps"]) - kept,
        "probe_steps": probe_steps,
        "learning_rate": found["chosen"]["learning_rate"] if found else cfg["learning_rate"],
        "train_s": round(train.get("seconds") or 0.0, 1),
        "wall_s": round(time.perf_counter() - t0, 1),
        "probes": [
            {
                "lr": p["learning_rate"],
                "steps": p["steps"],
                "loss": p["values"],
                "metric": p.get("metric") or {},
                "widened": p.get("widened", False),
            }
            for p in found["probes"]
        ]
        if found
        else None,
        "rungs": [
            {
                "step": c["step"],
                "ranked_by": c["ranked_by"],
                c.get("outcome") or "went on": [rates.get(t) for t in c["going_on"]],
            }
            for c in found.get("comparisons") or []
        ]
        if found
        else None,
    }


def one_task(root: Path, key: str, steps: list[int]) -> dict:
    from trainteam.workspace import Workspace

    ws = Workspace.open(root / key)  # a workspace per task: tasks may run side by side
    data = TASKS[key]
    base = pretrained(ws, key, data)
    common = {"per_device_train_batch_size": 64, "max_length": 64, "warmup_steps": 20}
    grid = {}
    for lr in GRID_LRS:
        for n in steps:
            r = sft_run(ws, f"{key}-g{lr:g}-{n}", data, base, {**common, "learning_rate": lr, "max_steps": n}, False)
            grid[f"lr {lr:g}, {n} steps"] = r
            print(
                f"  {key} grid lr {lr:g} {n} steps: exact match {r['exact_match']:.3f} ({r['train_s']} s)", flush=True
            )
    team = sft_run(ws, f"{key}-team", data, base, {**common, "max_steps": max(steps)}, True)
    print(
        f"  {key} team: lr {team['learning_rate']:g}, exact match {team['exact_match']:.3f}, "
        f"{team['probe_steps']} probe + {team['steps']} steps ({team['train_s']} s); probes (step: exact match / "
        "held-out loss): "
        + "; ".join(
            f"lr {p['lr']:g}{' (widened)' if p['widened'] else ''} "
            + ", ".join(f"{k}: {p['metric'].get(k, float('nan')):.3f}/{v:.4f}" for k, v in p["loss"].items())
            for p in team["probes"] or []
        )
        + f"; rungs: {team['rungs']}",
        flush=True,
    )
    best = max(grid.values(), key=lambda r: r["exact_match"])
    grid_steps = sum(r["steps"] for r in grid.values())
    return {
        "grid": grid,
        "team": team,
        "grid_best": best["exact_match"],
        "grid_best_at": next(k for k, v in grid.items() if v is best),
        "fraction_of_grid_best": round(team["exact_match"] / best["exact_match"], 3) if best["exact_match"] else None,
        "fraction_of_grid_compute": round((team["steps"] + team["probe_steps"]) / grid_steps, 3),
        "fraction_of_grid_seconds": round(team["train_s"] / sum(r["train_s"] for r in grid.values()), 3),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", default="add2,sub2,add3")
    ap.add_argument("--steps", default="150,300,600", help="the grid's step counts; the team gets the longest")
    ap.add_argument("--jobs", type=int, default=1, help="tasks run side by side (one torch thread each)")
    ap.add_argument("--quick", action="store_true", help="one task, steps 50,100,200")
    a = ap.parse_args()
    keys = ["add2"] if a.quick else a.tasks.split(",")
    steps = [50, 100, 200] if a.quick else [int(s) for s in a.steps.split(",")]
    os.environ.setdefault(
        "TRAINTEAM_THREADS", "1"
    )  # one thread each: the same pace for every run, whatever the neighbours
    from concurrent.futures import ThreadPoolExecutor

    load = [os.getloadavg()[0]]
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(a.jobs) as pool:
        done = {k: pool.submit(one_task, Path(tmp), k, steps) for k in keys}
        per = {k: f.result() for k, f in done.items()}
        load.append(os.getloadavg()[0])
    best = [v["fraction_of_grid_best"] for v in per.values() if v["fraction_of_grid_best"] is not None]
    compute = [v["fraction_of_grid_compute"] for v in per.values()]
    print("\n| task | grid best (where) | team (lr) | fraction of grid best | fraction of grid compute |")
    print("|---|---|---|---|---|")
    for k, v in per.items():
        print(
            f"| {k} | {v['grid_best']:.3f} ({v['grid_best_at']}) | {v['team']['exact_match']:.3f} "
            f"({v['team']['learning_rate']:g}) | {v['fraction_of_grid_best']} | {v['fraction_of_grid_compute']} |"
        )
    result = {
        "tasks": {
            k: {
                x: v[x]
                for x in (
                    "grid_best",
                    "grid_best_at",
                    "fraction_of_grid_best",
                    "fraction_of_grid_compute",
                    "fraction_of_grid_seconds",
                )
            }
            | {
                "team_exact_match": v["team"]["exact_match"],
                "team_lr": v["team"]["learning_rate"],
                "team_steps": v["team"]["steps"],
                "team_probe_steps": v["team"]["probe_steps"],
                "team_rungs": v["team"]["rungs"],
                "grid": {g: r["exact_match"] for g, r in v["grid"].items()},
            }
            for k, v in per.items()
        },
        "fraction_of_grid_best": round(min(best), 3) if best else None,
        "fraction_of_grid_best_median": round(statistics.median(best), 3) if best else None,
        "fraction_of_grid_compute": round(max(compute), 3),
        "goals": {"fraction_of_grid_best": ">= 0.95", "fraction_of_grid_compute": "<= 0.35"},
        "load": {"start": round(load[0], 2), "end": round(load[-1], 2)},
        "steps": steps,
        "wall_s": round(time.perf_counter() - t0, 1),
        "jobs": a.jobs,
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
