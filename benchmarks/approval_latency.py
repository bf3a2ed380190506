"""Approval -> resume latency, SQLite against Postgres.

A run (``execute-workflow`` in its own process) walks K one-tool steps, each behind a person's
go-ahead (``require_approval``), so it parks in ``await_approval`` (DBOS ``recv``) K times. For each
wait this process decides the approval as a person does (``workflows.approvals.decide``: the
decision row, then a DBOS message to the run) and the latency is measured from the decision's
``decided_at`` to the ``started_at`` of the step's attempt in the run's process (both database
timestamps from one clock), plus the wall time of ``decide`` itself (the sender's side: the
decision row, a DBOS client, the message) and the time from ``decide`` returning (the message
sent) to the step's start: the wake-up itself and the run's few DBOS steps before the step.

SQLite: DBOS polls for messages every ``notification_polling_s`` (trainteam's default 0.05 s).
Postgres: the message's insert fires a NOTIFY that wakes the waiting ``recv`` (push). The server is
a throwaway cluster (tests/pg_server.py). Medians; ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from pg_server import PgServer  # noqa: E402

K = 8  # approvals per backend
POLLING_S = (0.05, 0.1)  # trainteam's default notification polling interval, and the most it allows
TASK = {
    "name": "latency",
    "workflow": "latency",
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64},
    "data": {"demo": "addition", "n_train": 200, "n_eval": 16, "max_operand": 20},
    "tokenizer": {"vocab_size": 280},
    "stages": ["pretrain"],
    "training": {"pretrain": {"max_steps": 6, "per_device_train_batch_size": 8, "max_length": 32}},
    "budget": {"max_wall_minutes": 30},
    "require_approval": [f"p{i}" for i in range(K)],
}
SPEC = {
    "name": "latency",
    "start": "p0",
    "steps": [{"name": f"p{i}", "persona": "data_curator", "tool": "prepare_corpus"} for i in range(K)],
    "edges": [{"from": f"p{i}", "to": f"p{i + 1}"} for i in range(K - 1)],
}


def _ts(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def _wait(predicate, run: subprocess.Popen, err: Path, timeout: float = 120.0, interval: float = 0.002):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if run.poll() is not None:
            raise RuntimeError(f"the run exited {run.returncode}: {err.read_text()[-2000:]}")
        time.sleep(interval)
    raise RuntimeError(f"timed out: {err.read_text()[-2000:]}")


def measure(folder: Path, url: str | None, polling_s: float) -> dict:
    from trainteam.settings import Settings
    from trainteam.workflows.engine.approvals import decide
    from trainteam.workflows.engine.store import ApprovalStore, RunStore
    from trainteam.workspace import Workspace

    folder.mkdir(parents=True, exist_ok=True)
    ws_path = folder / "ws"
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TRAINTEAM_THREADS": "1",
        "TRAINTEAM_NOTIFICATION_POLLING_S": str(polling_s),
    }
    settings = Settings()
    if url:
        env.update(TRAINTEAM_DATABASE_URL=url, TRAINTEAM_DBOS_DATABASE_URL=url)
        settings = Settings(database_url=url, dbos_database_url=url)
    (folder / "spec.yaml").write_text(yaml.safe_dump(SPEC))
    (folder / "task.yaml").write_text(yaml.safe_dump(TASK))
    ws = Workspace.open(ws_path, settings)
    run = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainteam.cli",
            "-w",
            str(ws_path),
            "execute-workflow",
            str(folder / "spec.yaml"),
            "--task",
            str(folder / "task.yaml"),
            "--run-id",
            "lat",
            "-q",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(folder / "run.err", "w"),
    )
    approvals, runs = ApprovalStore(ws.engine), RunStore(ws.engine)
    latencies, sends, woken = [], [], []
    try:
        for i in range(K):
            pending = _wait(lambda: approvals.list("pending", "lat"), run, folder / "run.err")
            time.sleep(0.3)  # the run is parked in recv by now
            t0 = time.perf_counter()
            decide(ws, pending[0]["id"], approve=True, by="bench")
            sends.append(time.perf_counter() - t0)
            sent = time.time()  # decide() returns right after the message is sent
            step = f"p{i}"
            started = _wait(
                lambda step=step: [a for a in runs.attempts("lat") if a["step"] == step], run, folder / "run.err"
            )
            attempt = started[0]
            decided = approvals.get(pending[0]["id"])["decided_at"]
            latencies.append(_ts(attempt["started_at"]) - _ts(decided))
            woken.append(_ts(attempt["started_at"]) - sent)
        if run.wait(timeout=120) != 0:
            raise RuntimeError((folder / "run.err").read_text()[-2000:])
    finally:
        if run.poll() is None:
            run.kill()
    return {
        "median_s": round(statistics.median(latencies), 4),
        "min_s": round(min(latencies), 4),
        "max_s": round(max(latencies), 4),
        "decide_median_s": round(statistics.median(sends), 4),
        "sent_to_step_median_s": round(statistics.median(woken), 4),
        "n": K,
    }


def main() -> None:
    import dbos  # noqa: F401  warm: decide() imports DBOS's client on its first call

    with tempfile.TemporaryDirectory() as tmp, PgServer.start() as pg:
        sqlite = measure(Path(tmp) / "sqlite", None, POLLING_S[0])
        postgres = measure(Path(tmp) / "pg", pg.new_database("lat"), POLLING_S[0])
        # the polling interval doubled: a polled wake-up waits longer, a pushed one does not
        sqlite_slow = measure(Path(tmp) / "sqlite2", None, POLLING_S[1])
        postgres_slow = measure(Path(tmp) / "pg2", pg.new_database("lat"), POLLING_S[1])
    result = {
        "sqlite": sqlite,
        "postgres": postgres,
        "polling_s": POLLING_S[0],
        "sqlite_polling_0.1": sqlite_slow,
        "postgres_polling_0.1": postgres_slow,
        "ratio_sqlite_over_postgres": round(sqlite["median_s"] / max(postgres["median_s"], 1e-6), 2),
        "wake_ratio_sqlite_over_postgres": round(
            sqlite["sent_to_step_median_s"] / max(postgres["sent_to_step_median_s"], 1e-6), 2
        ),
    }
    for name, r in (
        ("SQLite", sqlite),
        ("Postgres", postgres),
        ("SQLite, polling 0.1 s", sqlite_slow),
        ("Postgres, polling 0.1 s", postgres_slow),
    ):
        print(
            f"{name}: approval -> step started {r['median_s'] * 1000:.0f} ms (median of {K}; "
            f"min {r['min_s'] * 1000:.0f}, max {r['max_s'] * 1000:.0f}); "
            f"decide() {r['decide_median_s'] * 1000:.0f} ms; "
            f"message sent -> step started {r['sent_to_step_median_s'] * 1000:.0f} ms"
        )
    print(
        f"ratio SQLite / Postgres at polling {POLLING_S[0]} s: {result['ratio_sqlite_over_postgres']} "
        f"(from the message: {result['wake_ratio_sqlite_over_postgres']})"
    )
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
