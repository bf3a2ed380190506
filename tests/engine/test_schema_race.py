"""Several processes opening one brand-new workspace at the same instant all succeed.

CI (2026-12-01) failed once with "table approvals already exists": a run's subprocess and
the test's poll both created the schema. Real processes, a real SQLite file, released
together by a barrier file so their `create_all` calls overlap.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

OPENER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from trainteam.workflows.engine.store import ApprovalStore
    from trainteam.workspace import Workspace
    go = Path(sys.argv[2])
    Path(sys.argv[3]).touch()  # imported, waiting
    while not go.exists():
        time.sleep(0.0005)
    print(len(ApprovalStore(Workspace.open(Path(sys.argv[1])).engine).list("pending")))
    """
)


def test_eight_processes_create_one_new_workspace_at_once(tmp_path, database):
    for trial in range(2 if database == "sqlite" else 1):  # Postgres: one fresh database
        ws, go = tmp_path / f"ws{trial}", tmp_path / f"go{trial}"
        ready = [tmp_path / f"ready{trial}-{i}" for i in range(8)]
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", OPENER, str(ws), str(go), str(flag)],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for flag in ready
        ]
        deadline = time.monotonic() + 120
        while not all(f.exists() for f in ready) and time.monotonic() < deadline:
            time.sleep(0.05)
        go.touch()
        results = [p.communicate(timeout=600) for p in procs]
        failures = [_error_line(err) for (_, err), p in zip(results, procs, strict=True) if p.returncode]
        assert not failures, f"trial {trial}: {failures}"
        assert [out.strip() for out, _ in results] == ["0"] * 8


def _error_line(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if "Error" in ln and ":" in ln]
    return lines[-1] if lines else stderr[-300:]
