"""Workers sharing one run queue on Postgres: 3 workers, 9 queued runs, one worker killed mid-run.

A throwaway PostgreSQL server (tests/pg_server.py) holds the workspace's tables and DBOS's. Nine
small runs (data, curation, tokenizer, 30 pretraining steps of the tests' tiny Llama, eval) are
queued with ``execute_workflow(detach=True)`` (what ``execute-workflow --detach`` calls); three
``trainteam worker`` processes take them. When the first run's ``train`` step is under way on a
worker (its attempt started and a checkpoint saved), that worker gets SIGKILL; a live worker finds
its lease gone and hands its run back to the queue. Checked: every run completes; each run's DBOS
step records are unique and each step has one finished attempt (the killed step's cut-short
attempt is the only other one); how many runs each worker finished. The same nine runs on one
worker (fresh database, no kill) give the baseline wall time.

Ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from pg_server import PgServer  # noqa: E402

N_RUNS, N_WORKERS = 9, 3
SPEC = {
    "name": "queue_small",
    "start": "prepare_corpus",
    "steps": [
        {"name": "prepare_corpus", "persona": "data_curator", "tool": "prepare_corpus"},
        {"name": "curate", "persona": "data_curator", "tool": "curate"},
        {"name": "train_tokenizer", "persona": "training_engineer", "tool": "train_tokenizer"},
        {"name": "train", "persona": "training_engineer", "tool": "train"},
        {"name": "evaluate", "persona": "eval_judge", "tool": "evaluate", "inputs": {"of": "train"}},
    ],
    "edges": [
        {"from": a, "to": b}
        for a, b in (
            ("prepare_corpus", "curate"),
            ("curate", "train_tokenizer"),
            ("train_tokenizer", "train"),
            ("train", "evaluate"),
        )
    ],
}
TASK = {
    "name": "qsmall",
    "workflow": "queue_small",
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64},
    "data": {"demo": "addition", "n_train": 400, "n_eval": 16, "max_operand": 20},
    "tokenizer": {"vocab_size": 280},
    "stages": ["pretrain"],
    "training": {"pretrain": {"max_steps": 30, "per_device_train_batch_size": 8, "max_length": 32, "save_steps": 5}},
    "budget": {"max_wall_minutes": 30},
    "require_approval": [],
}


class Phase:
    """One database, N runs queued, some workers."""

    def __init__(self, folder: Path, url: str):
        import yaml

        from trainteam.settings import Settings
        from trainteam.workspace import Workspace

        folder.mkdir(parents=True)
        self.folder, self.url, self.ws_path = folder, url, folder / "ws"
        self.spec = folder / "spec.yaml"
        self.spec.write_text(yaml.safe_dump(SPEC))
        self.env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "TRAINTEAM_THREADS": "1",
            "TRAINTEAM_DATABASE_URL": url,
            "TRAINTEAM_DBOS_DATABASE_URL": url,
        }
        self.ws = Workspace.open(self.ws_path, Settings(database_url=url, dbos_database_url=url))
        self.workers: dict[str, subprocess.Popen] = {}

    def enqueue(self) -> list[str]:
        import trainteam

        ids = [f"run{i}" for i in range(N_RUNS)]
        for run_id in ids:
            trainteam.execute_workflow(str(self.spec), TASK, workspace=self.ws, run_id=run_id, detach=True)
        return ids

    def start_workers(self, n: int) -> None:
        for i in range(n):
            name = f"w{i}"
            err = open(self.folder / f"{name}.err", "w")
            self.workers[name] = subprocess.Popen(
                [sys.executable, "-m", "trainteam.cli", "-w", str(self.ws_path), "worker", "--poll", "0.2"],
                env=self.env,
                stdout=subprocess.DEVNULL,
                stderr=err,
                start_new_session=True,
            )

    def worker_of(self, executor_id: str | None) -> str | None:
        pid = (executor_id or "::").split(":")[1]
        return next((n for n, p in self.workers.items() if str(p.pid) == pid), None)

    def stop(self) -> None:
        for p in self.workers.values():
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def _wait(predicate, timeout: float, what: str, interval: float = 0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise RuntimeError(f"timed out waiting for {what}")


def _views(phase: Phase, ids: list[str]) -> dict[str, dict]:
    from trainteam.workflows.report.views import run_public

    views = {r: run_public(phase.ws, r) for r in ids}
    bad = {r: v["error"] for r, v in views.items() if v["status"] in ("failed", "cancelled")}
    if bad:
        raise RuntimeError(f"runs failed: {bad}")
    return views


def _all_completed(phase: Phase, ids: list[str], timeout: float) -> dict[str, dict]:
    return _wait(
        lambda: (lambda v: v if all(x["status"] == "completed" for x in v.values()) else None)(_views(phase, ids)),
        timeout,
        "every run completed",
        interval=0.5,
    )


def _mid_train(phase: Phase, ids: list[str]):
    """A run whose train attempt is open on a worker with a checkpoint saved: (run id, worker)."""
    from trainteam.workflows.engine.store import RunStore

    runs = RunStore(phase.ws.engine)
    for run_id in ids:
        open_train = [a for a in runs.attempts(run_id) if a["step"] == "train" and a["status"] == "running"]
        ckpt = phase.ws_path / "checkpoints" / run_id / "pretrain-v1"
        if open_train and ckpt.is_dir() and any(p.name.startswith("checkpoint-") for p in ckpt.iterdir()):
            worker = phase.worker_of(open_train[-1]["executor_id"])
            if worker:
                return run_id, worker
    return None


def _once_each(phase: Phase, ids: list[str]) -> tuple[bool, Counter, list[str]]:
    """(each step once, runs finished per worker, what broke the rule)."""
    from dbos import DBOSClient

    from trainteam.workflows.engine.store import RunStore

    runs, client = RunStore(phase.ws.engine), DBOSClient(system_database_url=phase.url)
    per_worker: Counter = Counter()
    broken = []
    try:
        for run_id in ids:
            names = [s["function_name"] for s in client.list_workflow_steps(run_id)]
            dup = [n for n, c in Counter(names).items() if c > 1]
            finished = Counter(
                (a["step"], a["visit"]) for a in runs.attempts(run_id) if a["status"] not in ("running", "interrupted")
            )
            twice = [k for k, c in finished.items() if c != 1]
            if dup or twice:
                broken.append(f"{run_id}: DBOS steps twice {dup}, attempts finished twice {twice}")
            per_worker[phase.worker_of(runs.get(run_id)["executor_id"]) or "?"] += 1
    finally:
        client.destroy()
    return not broken, per_worker, broken


def main() -> None:
    import dbos  # noqa: F401  warm the imports both phases use

    import trainteam  # noqa: F401

    with tempfile.TemporaryDirectory() as tmp, PgServer.start() as pg:
        shared = Phase(Path(tmp) / "three", pg.new_database("queue"))
        ids = shared.enqueue()
        t0 = time.monotonic()
        shared.start_workers(N_WORKERS)
        try:
            killed_run, killed = _wait(lambda: _mid_train(shared, ids), 600, "a run mid-training")
            os.killpg(shared.workers[killed].pid, signal.SIGKILL)
            shared.workers[killed].wait(timeout=10)
            killed_at = time.monotonic() - t0
            views = _all_completed(shared, ids, 900)
            wall_3 = time.monotonic() - t0
        finally:
            shared.stop()
        once, per_worker, broken = _once_each(shared, ids)
        interrupted = sum(1 for v in views.values() for s in v["steps"] if s["attempts"] > 1)

        alone = Phase(Path(tmp) / "one", pg.new_database("queue1"))
        ids1 = alone.enqueue()
        t1 = time.monotonic()
        alone.start_workers(1)
        try:
            _all_completed(alone, ids1, 1200)
            wall_1 = time.monotonic() - t1
        finally:
            alone.stop()

    result = {
        "runs_total": N_RUNS,
        "runs_completed": sum(v["status"] == "completed" for v in views.values()),
        "each_step_once": once,
        "workers_used": len([w for w in per_worker if w != "?"]),
        "runs_per_worker": dict(per_worker),
        "killed_worker": killed,
        "killed_run": killed_run,
        "killed_at_s": round(killed_at, 1),
        "steps_run_again": interrupted,
        "wall_3_workers_s": round(wall_3, 1),
        "wall_1_worker_s": round(wall_1, 1),
        "speedup": round(wall_1 / wall_3, 2),
        "cores": os.cpu_count(),
    }
    print(
        f"{N_WORKERS} workers, {N_RUNS} runs, {killed} killed at {killed_at:.1f} s while {killed_run} trained: "
        f"{result['runs_completed']}/{N_RUNS} completed in {wall_3:.1f} s; 1 worker: {wall_1:.1f} s "
        f"(x{result['speedup']} on {os.cpu_count()} cores); runs finished per worker {dict(per_worker)}; "
        f"each step once: {once}" + (f" ({'; '.join(broken)})" if broken else "")
    )
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
