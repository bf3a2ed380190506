"""Read-only access to a workspace's own SQLite database through the stdlib ``sqlite3``.

Why: ``approvals list``, ``runs list`` and the other short list/show commands run once per
call a person makes, and importing SQLAlchemy and pydantic-settings alone costs ~0.3 s of a
cold start. These commands only read, so on the default SQLite database they read it here,
opened read-only (``mode=ro``). Everything else (writes, Postgres or any configured database
URL, a workspace not created yet, a schema this code does not know) takes the full path
through ``Workspace.open``, which is why ``connect_readonly`` answers None rather than guess.

Holds ``SCHEMA_VERSION`` (``trainteam.db`` re-exports it) so this check needs no SQLAlchemy.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path
from typing import Any, Iterable

SCHEMA_VERSION = 1
DEFAULT_HOME = ".trainteam"
DB_FILE = "trainteam.db"


def env_setting(name: str) -> str | None:
    """``TRAINTEAM_<NAME>`` as ``Settings`` reads it: pydantic-settings matches env names
    case-insensitively (the last match wins)."""
    key, found = f"trainteam_{name}".lower(), None
    for k, v in os.environ.items():
        if k.lower() == key:
            found = v
    return found


def connect_readonly(root: str | Path | None, tables: Iterable[str]) -> sqlite3.Connection | None:
    """A read-only connection to the workspace's default database holding ``tables``, or None
    when the caller must take the full path (see the module docstring)."""
    if env_setting("database_url"):
        return None  # an explicit URL (Postgres, or a SQLite file elsewhere): SQLAlchemy's job
    if root is None:
        home = env_setting("home")
        root = home if home is not None else DEFAULT_HOME
    db = Path(root) / DB_FILE
    if not db.is_file():
        return None  # a new workspace: Workspace.open creates it
    try:
        conn = sqlite3.connect(db.resolve().as_uri() + "?mode=ro", uri=True, timeout=30)
    except sqlite3.Error:
        return None
    try:
        meta = dict(conn.execute("SELECT key, value FROM tt_meta WHERE key IN ('schema_version', 'tables')"))
        if meta.get("schema_version") == str(SCHEMA_VERSION) and set(tables) <= set(meta.get("tables", "").split(",")):
            return conn
    except sqlite3.Error:
        pass  # no tt_meta yet, or not a database: the full path says what is wrong
    conn.close()
    return None


def fetch(conn: sqlite3.Connection, sql: str, params: tuple = (), *, columns: tuple[str, ...],
          json_columns: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """Rows as dicts with JSON text decoded, as ``trainteam.db.JSONText`` returns them."""
    out = []
    for values in conn.execute(sql, params):
        row = dict(zip(columns, values))
        for c in json_columns:
            if row[c] is not None:
                row[c] = json.loads(row[c])
        out.append(row)
    return out
