"""Read-only access to a workspace's own SQLite database through the stdlib ``sqlite3``.

Why: ``approvals list``, ``runs list`` and the other short list/show commands run once per
call a person makes, and importing SQLAlchemy and pydantic-settings alone costs ~0.3 s of a
cold start. These commands only read, so on the default SQLite database they read it here,
opened read-only (``mode=ro``). Everything else (writes, Postgres or any configured database
URL, a workspace not created yet, a schema this code does not know) takes the full path
through ``Workspace.open``, which is why ``connect_readonly`` answers None rather than guess.

Holds ``SCHEMA_VERSION`` (``trainteam.core.db`` re-exports it) so this check needs no SQLAlchemy.

Also the cheap checks for a damaged database, which every command runs where it opens the
workspace's SQLite files (here, ``Workspace.open`` and before DBOS launches): the 16-byte
SQLite magic, a file shorter than its header says, and a zero-byte file where data must be
(``trainteam.db`` once ``workspace.json`` records that its schema was created; ``dbos.sqlite``
once runs exist). SQLite itself would call a zero-byte file a fresh empty database and
recreate the schema over the loss. While a writer's journal or write-ahead log holds data the
main file alone may be mid-change, so the checks then leave the verdict to SQLite, whose
errors ``diagnose`` turns into the same one line (``PRAGMA quick_check`` names the file).
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput

SCHEMA_VERSION = 1
DEFAULT_HOME = ".trainteam"
DB_FILE = "trainteam.db"
DBOS_FILE = "dbos.sqlite"
MARKER = "workspace.json"  # written once the schema exists: a zero-byte trainteam.db is then a loss
SQLITE_MAGIC = b"SQLite format 3\x00"
_ADVICE = "restore it from a backup, or move it away to start afresh"


def env_setting(name: str) -> str | None:
    """``TRAINTEAM_<NAME>`` as ``Settings`` reads it: pydantic-settings matches env names
    case-insensitively (the last match wins)."""
    key, found = f"trainteam_{name}".lower(), None
    for k, v in os.environ.items():
        if k.lower() == key:
            found = v
    return found


def workspace_root(root: str | Path | None) -> Path:
    """The workspace folder as ``Settings.home`` resolves it (``--workspace``, TRAINTEAM_HOME)."""
    if root is None:
        home = env_setting("home")
        root = home if home is not None else DEFAULT_HOME
    return Path(root)


def sqlite_path(url: str | None) -> Path | None:
    """The file of a ``sqlite:///PATH`` URL; None for other databases and in-memory ones."""
    if not url or not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :].split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None


def connect_readonly(root: str | Path | None, tables: Iterable[str]) -> sqlite3.Connection | None:
    """A read-only connection to the workspace's default database holding ``tables``, or None
    when the caller must take the full path (see the module docstring). A damaged database is
    a BadInput naming it, as ``Workspace.open`` says it."""
    if env_setting("database_url"):
        return None  # an explicit URL (Postgres, or a SQLite file elsewhere): SQLAlchemy's job
    root = workspace_root(root)
    db = root / DB_FILE
    if not db.is_file():
        return None  # a new workspace: Workspace.open creates it
    check_database(db, must_hold_data=(root / MARKER).is_file(), why_data="workspace.json says its schema was created")
    dbos = dbos_path(root)
    if dbos is not None:
        check_database(dbos)
    hold(db)
    conn = _connect_ro(db)
    if conn is None:
        return None
    try:
        meta = dict(conn.execute("SELECT key, value FROM tt_meta WHERE key IN ('schema_version', 'tables')"))
        if meta.get("schema_version") == str(SCHEMA_VERSION) and set(tables) <= set(meta.get("tables", "").split(",")):
            if dbos is not None:
                check_database(
                    dbos, must_hold_data=lambda: runs_exist(conn), why_data="the workspace has runs", wait_s=1.0
                )
            return conn
    except sqlite3.Error:
        pass  # no tt_meta yet, or not a database: the full path says what is wrong
    conn.close()
    return None


def _connect_ro(db: Path) -> sqlite3.Connection | None:
    """``mode=ro``; on a workspace this user cannot write, a WAL database whose ``-shm`` is gone
    cannot be opened so, and is read as ``immutable`` (nobody can be writing it then, unless
    a process with more rights is: its newest commits may then be missed)."""
    uri = db.resolve().as_uri()
    try:
        conn = sqlite3.connect(uri + "?mode=ro", uri=True, timeout=30)
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        return conn
    except sqlite3.Error:
        if os.access(db.parent, os.W_OK):
            return None
    try:
        return sqlite3.connect(uri + "?immutable=1", uri=True, timeout=30)
    except sqlite3.Error:
        return None


def dbos_path(root: Path) -> Path | None:
    """The DBOS system database's file, where it is SQLite (the default: ``dbos.sqlite``)."""
    url = env_setting("dbos_database_url")
    return sqlite_path(url) if url else Path(root) / DBOS_FILE


def runs_exist(conn: sqlite3.Connection) -> bool:
    try:
        return conn.execute("SELECT 1 FROM runs LIMIT 1").fetchone() is not None
    except sqlite3.Error:
        return False


def damaged(path: Path, reason: str) -> BadInput:
    return BadInput(f"workspace database {path} is damaged ({reason}): {_ADVICE}")


def check_database(
    path: Path, must_hold_data: bool | Callable[[], bool] = False, why_data: str = "", wait_s: float = 0.0
) -> None:
    """Raise ``damaged(...)`` when the cheap checks find the SQLite file at ``path`` damaged:
    its header (``header_damage``), then its schema pages read on a read-only connection.

    ``must_hold_data`` (or a callable asked only when the file is empty): a zero-byte file is a
    loss, not a new database, once it has stayed empty for ``wait_s`` while no writer's log holds
    data (a process creating the file writes its first page within milliseconds)."""
    found = header_damage(path)
    if found is None and _empty(path) and (must_hold_data() if callable(must_hold_data) else must_hold_data):
        deadline = time.monotonic() + wait_s
        while _empty(path) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _empty(path):
            found = f"0 bytes, but {why_data}"
    if found is None and path.is_file() and not _empty(path):
        found = schema_damage(path)
    if found:
        raise damaged(path, found)


def _corruption(exc: sqlite3.Error) -> bool:
    """SQLite's own verdict that a file is damaged (not: locked, cannot open, read-only)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB"))


def schema_damage(path: Path) -> str | None:
    """Read the schema (``sqlite_master``, which every open reads first) on a read-only
    connection: what SQLite calls corrupt there, or None. About a millisecond."""
    try:
        conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True, timeout=5)
        try:
            conn.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return str(exc) if _corruption(exc) else None
    return None


def _empty(path: Path) -> bool:
    try:
        return path.stat().st_size == 0 and not _busy(path)
    except OSError:
        return False


def _busy(path: Path) -> bool:
    """A writer's rollback journal or write-ahead log holds data: the main file may be mid-change."""
    for suffix in ("-wal", "-journal"):
        try:
            if os.stat(f"{path}{suffix}").st_size > 0:
                return True
        except OSError:
            pass
    return False


def header_damage(path: Path) -> str | None:
    """What the SQLite header says is wrong with the file (None: sound, absent, empty, unreadable
    by this user, or a writer busy with it). Looked at twice, 50 ms apart, before it is believed:
    a checkpoint writes page 1 before the pages that make the file as long as it says."""
    if _header_damage(path) is None:
        return None
    time.sleep(0.05)
    found = _header_damage(path)
    return None if found is None or _busy(path) else found


# Files this process has opened through SQLite (our engines, read-only connections, DBOS).
# Their header is never read with a plain open() again: closing any descriptor of a file drops
# every POSIX lock this process holds on it, SQLite's included — measured here: a test process
# polling ``Workspace.open`` while a run wrote the same workspace lost the run's rows (its WAL
# was reset under it). SQLite's own connections share descriptors and are safe.
_HELD: set[str] = set()


def hold(path: Path | None) -> None:
    """Record that this process opens ``path`` through SQLite from now on."""
    if path is not None:
        _HELD.add(os.path.abspath(path))


def _header_damage(path: Path) -> str | None:
    if os.path.abspath(path) in _HELD:
        return None  # see _HELD: SQLite's own errors (cli.main's diagnose) speak for this file now
    try:
        size = path.stat().st_size
        with open(path, "rb") as fh:
            head = fh.read(100)
    except OSError:
        return None  # absent, or not readable by this user: not a verdict on its contents
    if size == 0:
        return None
    if head[:16] != SQLITE_MAGIC[: len(head)] or len(head) < 16:
        return "file is not a database"
    if len(head) < 100:
        return f"truncated to {size} bytes, shorter than the 100-byte SQLite header"
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    if page < 512 or page & (page - 1):
        return "file is not a database (bad page size)"
    pages = int.from_bytes(head[28:32], "big")
    if pages and head[24:28] == head[92:96] and page * pages > size:
        return f"truncated: {size} bytes, its header says {page * pages}"
    return None


def quick_check_damage(path: Path) -> str | None:
    """``PRAGMA quick_check`` on a read-only connection: what SQLite finds corrupt, or None
    (sound, or an error that is not corruption: locked, cannot open, ...)."""
    try:
        conn = sqlite3.connect(Path(path).resolve().as_uri() + "?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute("PRAGMA quick_check(1)").fetchone()
        finally:
            conn.close()
    except sqlite3.Error as exc:
        return str(exc) if _corruption(exc) else None
    first = " ".join(str(row[0]).replace("*** in database main ***", "").split()) if row else "no answer"
    return None if first == "ok" else f"quick_check: {first[:200]}"


def diagnose(paths: Iterable[Path]) -> str | None:
    """After a database error: the one line naming the damaged file among ``paths``, or None
    when none of them is damaged (the error was something else)."""
    for path in paths:
        if path is None or not Path(path).is_file():
            continue
        found = header_damage(path) or quick_check_damage(path)
        if found:
            return str(damaged(Path(path), found))
    return None


def workspace_databases(root: str | Path | None) -> list[Path]:
    """The SQLite files a command may have opened: trainteam.db (or TRAINTEAM_DATABASE_URL's
    file) and dbos.sqlite (or TRAINTEAM_DBOS_DATABASE_URL's)."""
    root = workspace_root(root)
    url = env_setting("database_url")
    db = sqlite_path(url) if url else root / DB_FILE
    return [p for p in (db, dbos_path(root)) if p is not None]


def fetch(
    conn: sqlite3.Connection,
    sql: str,
    params: tuple = (),
    *,
    columns: tuple[str, ...],
    json_columns: tuple[str, ...] = (),
) -> list[dict[str, Any]]:
    """Rows as dicts with JSON text decoded, as ``trainteam.core.db.JSONText`` returns them."""
    out = []
    for values in conn.execute(sql, params):
        row = dict(zip(columns, values, strict=True))
        for c in json_columns:
            if row[c] is not None:
                row[c] = json.loads(row[c])
        out.append(row)
    return out
