"""Short commands stay light: only the invoked command's module is imported, and list/show read a
SQLite workspace with the stdlib (read-only) yet print exactly what the SQLAlchemy path prints."""

from __future__ import annotations

import inspect
import json
import os
import sqlite3
import subprocess
import sys

import pytest
from spine_helpers import DATA, cli, pending_approvals, spawn, wait_for, write_task

PROBE = ("import sys\n"
         "from trainteam.cli import main\n"
         "try:\n    main(sys.argv[1:])\n"
         "except SystemExit:\n    pass\n"
         "print('MODULES', sorted(m for m in sys.modules if m.split('.')[0] in ('sqlalchemy', 'pydantic_settings')"
         " or m.startswith('trainteam.commands.')))\n")


def _modules(*args: str, env: dict | None = None) -> set[str]:
    out = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=600,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    line = out.stdout.strip().splitlines()[-1]
    assert line.startswith("MODULES "), out.stdout
    return set(eval(line.removeprefix("MODULES ")))


def _full_path(ws) -> dict[str, str]:
    # any configured database URL takes the SQLAlchemy path; this one is the workspace's own file
    return {"TRAINTEAM_DATABASE_URL": f"sqlite:///{ws / 'trainteam.db'}"}


READS = [
    ("approvals", "list"), ("approvals", "list", "--json"), ("approvals", "list", "--status", "all"),
    ("approvals", "list", "--status", "all", "--json"), ("approvals", "show", "{prefix}"),
    ("approvals", "show", "{approval}", "--json"), ("approvals", "show", "nope"),
    ("runs", "list"), ("runs", "list", "--json"), ("runs", "show", "r-read"), ("runs", "show", "r-read", "--json"),
    ("runs", "show", "nope"),
]


def _same_output_on_both_paths(ws, approval_id: str) -> None:
    for args in READS:
        args = [a.format(prefix=approval_id[:8], approval=approval_id) for a in args]
        fast, full = cli(ws, *args), cli(ws, *args, env=_full_path(ws))
        assert (fast.returncode, fast.stdout, fast.stderr) == (full.returncode, full.stdout, full.stderr), args
        assert fast.returncode in (0, 2) and (fast.stdout or fast.stderr), args


def test_read_only_path_prints_what_the_sqlalchemy_path_prints(tmp_path, ws):
    task = write_task(tmp_path, workflow="prep_only", require_approval=["prepare_corpus"])
    run = spawn(ws, "execute-workflow", str(DATA / "prep_only.yaml"), "--task", str(task), "--run-id", "r-read")
    try:
        approval = wait_for(lambda: pending_approvals(ws), what="a pending approval")[0]["id"]
        # the fast path is the one taken by default, the other one when a database URL is set
        assert not {"sqlalchemy", "pydantic_settings"} & _modules("-w", str(ws), "approvals", "list")
        assert "sqlalchemy" in _modules("-w", str(ws), "approvals", "list", env=_full_path(ws))

        _same_output_on_both_paths(ws, approval)  # a run waiting for a person
        listed = json.loads(cli(ws, "approvals", "list", "--json").stdout)
        assert [(a["id"], a["status"], a["proposed"]["tool"]) for a in listed] == [
            (approval, "pending", "prepare_corpus")]

        cli(ws, "approvals", "approve", approval, "--by", "erin", "--note", "fine", check=True)
        assert run.wait(timeout=600) == 0, run.stderr.read()
        _same_output_on_both_paths(ws, approval)  # finished: steps with attempts and seconds, metrics, a decision
        view = json.loads(cli(ws, "runs", "show", "r-read", "--json").stdout)
        assert view["status"] == "completed" and view["steps"][0]["attempts"] == 1 and view["metrics"]
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=10)


def test_list_and_show_on_sqlite_import_neither_sqlalchemy_nor_other_commands(ws):
    from trainteam.workspace import Workspace

    Workspace.open(ws)
    for args in (["approvals", "list"], ["approvals", "list", "--json"], ["runs", "list"], ["runs", "list", "--json"]):
        assert _modules("-w", str(ws), *args) == {f"trainteam.commands.{args[0]}", "trainteam.commands.common"}, args
    shown = _modules("-w", str(ws), "runs", "show", "nope")
    assert "sqlalchemy" not in shown


def test_new_workspace_and_newer_schema_take_the_full_path(tmp_path):
    fresh = tmp_path / "fresh"
    out = cli(fresh, "approvals", "list")
    assert out.returncode == 0 and out.stdout.strip() == "no pending approvals"
    assert (fresh / "trainteam.db").is_file() and (fresh / "checkpoints").is_dir()  # created, as before

    conn = sqlite3.connect(fresh / "trainteam.db")
    with conn:
        conn.execute("UPDATE tt_meta SET value = '99' WHERE key = 'schema_version'")
    conn.close()
    for args in (["approvals", "list"], ["runs", "list", "--json"]):
        out = cli(fresh, *args)
        assert out.returncode == 2 and "schema version 99 is newer" in out.stderr, args


def test_read_only_connection_cannot_write(ws):
    from trainteam.core.dbread import connect_readonly
    from trainteam.workflows.engine.readonly import TABLES
    from trainteam.workspace import Workspace

    Workspace.open(ws)
    conn = connect_readonly(ws, TABLES)
    assert conn is not None
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("DELETE FROM approvals")
    assert connect_readonly(ws / "missing", TABLES) is None
    assert connect_readonly(ws, TABLES + ("no_such_table",)) is None


def test_env_settings_read_like_pydantic_settings(monkeypatch, tmp_path):
    from trainteam.core.dbread import connect_readonly, env_setting
    from trainteam.settings import Settings
    from trainteam.workflows.engine.readonly import TABLES
    from trainteam.workspace import Workspace

    monkeypatch.delenv("TRAINTEAM_HOME", raising=False)
    monkeypatch.setenv("trainteam_home", str(tmp_path / "lower"))  # pydantic-settings ignores the case
    assert env_setting("home") == str(Settings().home) == str(tmp_path / "lower")
    Workspace.open()
    assert connect_readonly(None, TABLES) is not None
    monkeypatch.setenv("TRAINTEAM_DATABASE_URL", "postgresql://db.invalid/tt")
    assert connect_readonly(None, TABLES) is None  # Postgres (or any set URL) reads through SQLAlchemy


def test_read_only_columns_mirror_the_tables():
    from trainteam.workflows.engine import readonly
    from trainteam.workflows.engine.store import approvals_table, attempts_table, runs_table

    assert readonly.RUN_COLUMNS == tuple(c.name for c in runs_table.c)
    assert readonly.ATTEMPT_COLUMNS == tuple(c.name for c in attempts_table.c)
    assert readonly.APPROVAL_COLUMNS == tuple(c.name for c in approvals_table.c)
    assert set(readonly.TABLES) == {runs_table.name, attempts_table.name, approvals_table.name}


def test_top_level_help_lists_every_command_without_importing_any(tmp_path):
    from trainteam.cli import load_commands
    from trainteam.commands import COMMAND_MODULES, COMMANDS

    registered = {}
    for module in COMMAND_MODULES:
        registered.update(load_commands(module))
    assert list(registered) and set(registered) == set(COMMANDS)
    for name, command in registered.items():  # the stored line is the command's own first paragraph
        own = inspect.cleandoc(command.short_help or command.help or "").split("\n\n")[0].replace("\n", " ")
        assert COMMANDS[name][1] == own.strip(), name

    out = subprocess.run([sys.executable, "-m", "trainteam.cli", "--help"], capture_output=True, text=True,
                         timeout=600, env={**os.environ, "COLUMNS": "200"})
    assert out.returncode == 0, out.stderr
    for name, (_, line) in COMMANDS.items():
        assert f" {name} " in out.stdout and line[:60] in out.stdout, name
    assert _modules("--help") == {"trainteam.commands.common"}


def test_usage_errors_are_one_line_and_exit_2(ws):
    for args, message in ((["approvals", "list", "--bogus"], "No such option: --bogus"),
                          (["aprovals", "list"], "Did you mean 'approvals'?")):
        out = cli(ws, *args)
        assert out.returncode == 2 and message in out.stderr, (args, out.stderr)
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr
