"""A damaged or read-only workspace: one line naming the file (or folder) and what to do, exit 2,
no traceback, and the workspace byte-for-byte unchanged — for every kind of command.

Real CLI subprocesses on a real workspace (one completed run), its SQLite files then garbled,
truncated, zeroed or emptied. The read-only workspace is tested as a user who cannot write it:
``nobody`` when that user can run this interpreter, otherwise (root, with the interpreter
under a private home, as on the 2-core dev box) root without CAP_DAC_OVERRIDE on a 0555/0444
workspace, and as the same user on a 0555/0444 workspace when the tests do not run as root.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from spine_helpers import DATA, TINY_TASK, _env, cli


@pytest.fixture(scope="module")
def used(tmp_path_factory):
    """(workspace, run id, task file): a workspace holding one completed one-step run."""
    root = tmp_path_factory.mktemp("damaged")
    ws, task = root / "ws", root / "prep.yaml"
    task.write_text(yaml.safe_dump({**TINY_TASK, "workflow": "prep_only"}))
    cli(ws, "execute-workflow", str(DATA / "prep_only.yaml"), "--task", str(task), "-q", check=True)
    runs = json.loads(cli(ws, "runs", "list", "--json", check=True).stdout)
    assert not (ws / "trainteam.db-wal").exists() or (ws / "trainteam.db-wal").stat().st_size == 0
    for sidecar in ("trainteam.db-wal", "trainteam.db-shm"):  # left empty by the read-only reader
        (ws / sidecar).unlink(missing_ok=True)
    assert (ws / "workspace.json").is_file()
    return ws, runs[0]["run_id"], task


def _snapshot(ws: Path) -> dict[str, str]:
    return {
        str(p.relative_to(ws)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(ws.rglob("*"))
        if p.is_file() and not p.name.endswith(("-wal", "-shm"))
    }


def _damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    rnd = hashlib.shake_256(b"seed").digest(len(data))  # the same garbage every time
    path.write_bytes(
        {
            "garbled": rnd,
            "truncated": data[: len(data) // 2],
            "zeroed": bytes(len(data)),
            "zero-byte": b"",
            "garbled-pages": data[:100] + rnd[100:],  # header intact: only SQLite's reading finds it
        }[how]
    )


def _commands(run_id: str, task: Path, out: Path) -> dict[str, list[str]]:
    return {
        "runs list": ["runs", "list"],
        "runs show": ["runs", "show", run_id, "--json"],
        "approvals list": ["approvals", "list"],
        "approvals approve": ["approvals", "approve", f"{run_id}.prepare_corpus.1.x", "--by", "t"],
        "runs resume": ["runs", "resume", run_id],
        "graph export": ["graph", "export", "--out", str(out)],
        "execute-workflow": ["execute-workflow", str(DATA / "prep_only.yaml"), "--task", str(task), "-q"],
    }


# Each case runs a few commands (all seven are covered for each file) to keep the test short.
CASES = {
    ("trainteam.db", "garbled"): ("runs list", "approvals approve", "graph export"),
    ("trainteam.db", "truncated"): ("runs show", "runs resume", "execute-workflow"),
    ("trainteam.db", "zeroed"): ("approvals list", "execute-workflow", "graph export"),
    ("trainteam.db", "zero-byte"): ("runs list", "runs show", "approvals approve", "execute-workflow"),
    ("trainteam.db", "garbled-pages"): ("approvals list", "runs resume", "graph export"),
    ("dbos.sqlite", "garbled"): ("runs list", "runs resume", "execute-workflow"),
    ("dbos.sqlite", "truncated"): ("approvals list", "approvals approve", "graph export"),
    ("dbos.sqlite", "zeroed"): ("runs show", "execute-workflow"),
    ("dbos.sqlite", "zero-byte"): ("runs list", "runs resume", "execute-workflow"),
    ("dbos.sqlite", "garbled-pages"): ("runs show", "approvals approve", "execute-workflow"),
}


@pytest.mark.parametrize("name,how", sorted(CASES), ids=[f"{n}-{h}" for n, h in sorted(CASES)])
def test_a_damaged_database_is_one_line_naming_it(name, how, used, tmp_path):
    src, run_id, task = used
    ws = tmp_path / "ws"
    shutil.copytree(src, ws)
    _damage(ws / name, how)
    before = _snapshot(ws)
    commands = _commands(run_id, task, tmp_path / "graph.json")
    for command in CASES[(name, how)]:
        proc = cli(ws, *commands[command], timeout=600)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, (
            command,
            proc.stderr[-3000:],
        )
        assert lines[0].startswith(f"error: workspace database {ws / name} is damaged ("), (command, lines[0])
        assert lines[0].endswith("restore it from a backup, or move it away to start afresh"), (command, lines[0])
        assert _snapshot(ws) == before, command
    assert not (tmp_path / "graph.json").exists()


def test_a_new_workspace_still_starts_from_a_zero_byte_file_and_an_old_one_is_recorded(used, tmp_path):
    """Zero bytes and no record: a workspace being created (or from before the record existed)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "trainteam.db").write_bytes(b"")
    assert cli(ws, "approvals", "list").returncode == 0
    assert (ws / "workspace.json").is_file() and (ws / "trainteam.db").stat().st_size > 0
    old = tmp_path / "old"
    shutil.copytree(used[0], old)
    (old / "workspace.json").unlink()
    assert cli(old, "graph", "nodes").returncode == 0 and (old / "workspace.json").is_file()


# ----------------------------------------------------------------------- read-only workspace
def _drop_write_override() -> None:
    """In the child: root without CAP_DAC_OVERRIDE / CAP_DAC_READ_SEARCH obeys permission bits."""
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def _nobody_can_run_python() -> bool:
    try:
        return (
            subprocess.run(
                [sys.executable, "-c", "import trainteam.cli"],
                user="nobody",
                capture_output=True,
                env=_env(),
                timeout=600,
                cwd="/",
            ).returncode
            == 0
        )
    except (OSError, KeyError, subprocess.SubprocessError):
        return False


def _read_only_copy(src: Path, parent: Path) -> tuple[Path, dict, str]:
    """A copy of ``src`` this test's subprocesses cannot write, the ``subprocess.run`` keywords
    that make them such a user, and which way it was done."""
    ws = parent / "ws"
    shutil.copytree(src, ws)
    if os.geteuid() == 0 and _nobody_can_run_python():
        for p in [parent, ws, *ws.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)  # root's files: nobody reads them, writes nothing
        return ws, {"user": "nobody", "group": "nogroup", "extra_groups": []}, "as nobody"
    for p in [ws, *ws.rglob("*")]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    if os.geteuid() == 0:
        return ws, {"preexec_fn": _drop_write_override}, "as root without CAP_DAC_OVERRIDE"
    return ws, {}, "as this user"


def _run(ws: Path, args: list[str], kwargs: dict, home: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainteam.cli", "-w", str(ws), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**_env(), "HOME": str(home)},
        cwd="/",
        **kwargs,
    )


def test_a_read_only_workspace_is_refused_at_open_and_still_read(used, capsys):
    src, run_id, task = used
    parent = Path(tempfile.mkdtemp(prefix="trainteam-ro-"))  # outside pytest's private tmp: nobody can reach it
    try:
        ws, kwargs, how = _read_only_copy(src, parent)
        with capsys.disabled():
            print(f"\n[read-only workspace tested {how}]")
        before = _snapshot(ws)
        commands = _commands(run_id, task, parent / "graph.json")
        for command in ("approvals approve", "runs resume", "execute-workflow", "graph export"):
            proc = _run(ws, commands[command], kwargs, parent)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, (
                how,
                command,
                proc.stderr[-3000:],
            )
            assert lines[0].startswith(f"error: workspace {ws} is read-only: "), (how, command, lines[0])
            assert _snapshot(ws) == before, command
        # What only reads keeps working (the stdlib reader opens the database read-only).
        shown = _run(ws, commands["runs show"], kwargs, parent)
        assert shown.returncode == 0 and json.loads(shown.stdout)["run_id"] == run_id, (how, shown.stderr[-2000:])
        for command in ("runs list", "approvals list"):
            proc = _run(ws, commands[command], kwargs, parent)
            assert proc.returncode == 0 and not proc.stderr, (how, command, proc.stderr[-2000:])
        assert _snapshot(ws) == before
    finally:
        for p in [parent, *parent.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)
        shutil.rmtree(parent)
