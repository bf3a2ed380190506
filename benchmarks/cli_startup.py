"""CLI start-up and approval-to-resume latency.

1. Cold wall time of `trainteam approvals list` against `dbos workflow list` on the
   same workspace (both list what is waiting; the baseline is DBOS's own CLI).
   Goal: trainteam ≤ 0.8 s. Cold start depends on what else runs on the machine, so the
   1-minute load average around this part is reported with the figures.
2. Approval-to-resume latency over 20 decisions: a run with 20 gated steps waits in a
   live process; each decision is made from this process; latency is the time from
   the decision's commit to the start of the gated step (both timestamps written to
   the workspace database). Goal: median ≤ 0.2 s.

Ends with one line `RESULT {json}`.
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

VENV_BIN = Path(sys.executable).parent
N_DECISIONS = 20
REPEATS = 7


def _timed(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=env)
    return time.perf_counter() - t0


def _spec(n: int) -> dict:
    steps = [{"name": f"s{i:02d}", "persona": "data_curator", "tool": "prepare_corpus"} for i in range(n)]
    edges = [{"from": f"s{i:02d}", "to": f"s{i + 1:02d}"} for i in range(n - 1)]
    return {"name": "gated_chain", "start": "s00", "steps": steps, "edges": edges}


def main() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="tt-bench-"))
    ws = tmp / "ws"
    spec_path, task_path = tmp / "spec.yaml", tmp / "task.yaml"
    spec_path.write_text(yaml.safe_dump(_spec(N_DECISIONS)))
    task_path.write_text(yaml.safe_dump({
        "name": "bench", "workflow": "gated_chain",
        "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2},
        "data": {"demo": "addition", "n_train": 200, "n_eval": 10, "max_operand": 20},
        "budget": {"max_wall_minutes": 60},
        "require_approval": [f"s{i:02d}" for i in range(N_DECISIONS)],
    }))
    env = {**os.environ, "TRAINTEAM_HOME": str(ws)}
    run = subprocess.Popen([str(VENV_BIN / "trainteam"), "execute-workflow", str(spec_path), "--task",
                            str(task_path), "--run-id", "bench", "-q"], env=env,
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    from trainteam.api import approve
    from trainteam.workflows.engine.store import ApprovalStore, RunStore
    from trainteam.workspace import Workspace

    def wait_pending():
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if (ws / "trainteam.db").exists():
                rows = ApprovalStore(Workspace.open(ws).engine).list("pending")
                if rows:
                    return rows[0]
            time.sleep(0.005)
        raise RuntimeError("no pending approval appeared: " + (run.stderr.read() if run.poll() is not None else ""))

    first = wait_pending()
    # 1. cold start of the listing commands, with one run waiting in the workspace
    sys_db = f"sqlite:///{ws / 'dbos.sqlite'}"
    load_before = os.getloadavg()[0]
    ours, theirs = [], []
    for _ in range(REPEATS):  # interleaved, so that a change of load touches both sides alike
        ours.append(_timed([str(VENV_BIN / "trainteam"), "approvals", "list"], env))
        theirs.append(_timed([str(VENV_BIN / "dbos"), "workflow", "list", "-s", sys_db], env))
    load_after = os.getloadavg()[0]

    # 2. decision → resume latency
    wsh = Workspace.open(ws)
    latencies = []
    pending = first
    for i in range(N_DECISIONS):
        approve(pending["id"], by="bench", workspace=wsh)
        decided = datetime.fromisoformat(ApprovalStore(wsh.engine).get(pending["id"])["decided_at"])
        step = pending["step"]
        deadline = time.monotonic() + 30
        started = None
        while started is None and time.monotonic() < deadline:
            rows = [a for a in RunStore(wsh.engine).attempts("bench") if a["step"] == step]
            started = rows[0]["started_at"] if rows else None
            if started is None:
                time.sleep(0.002)
        latencies.append((datetime.fromisoformat(started) - decided).total_seconds())
        if i < N_DECISIONS - 1:
            pending = wait_pending()
    run.wait(timeout=60)

    med_ours, med_theirs = statistics.median(ours), statistics.median(theirs)
    result = {
        "approvals_list_cold_s": round(med_ours, 3),
        "dbos_workflow_list_cold_s": round(med_theirs, 3),
        "ratio_ours_over_dbos": round(med_ours / med_theirs, 3),
        "load_avg_1m": [round(load_before, 2), round(load_after, 2)],
        "cpus": os.cpu_count(),
        "approval_to_resume_median_s": round(statistics.median(latencies), 3),
        "approval_to_resume_p90_s": round(sorted(latencies)[int(0.9 * len(latencies)) - 1], 3),
        "approval_to_resume_max_s": round(max(latencies), 3),
        "decisions": len(latencies),
        "run_exit_code": run.returncode,
    }
    print(f"trainteam approvals list (cold, median of {REPEATS}): {med_ours:.3f} s")
    print(f"dbos workflow list       (cold, median of {REPEATS}): {med_theirs:.3f} s")
    print(f"ratio trainteam / dbos: {med_ours / med_theirs:.2f}  (goal: trainteam <= 0.8 s; "
          f"load average {load_before:.2f} -> {load_after:.2f} on {os.cpu_count()} CPUs)")
    print(f"approval -> resume over {len(latencies)} decisions: median {result['approval_to_resume_median_s']} s, "
          f"max {result['approval_to_resume_max_s']} s (goal: median <= 0.2 s)")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
