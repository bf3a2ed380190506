"""The workspace database: one SQLAlchemy MetaData that every component's tables join.

A leaf module (imports only SQLAlchemy and the stdlib reader `trainteam.core.dbread`) so that `trainteam.graph`
and the other subpackages can define their tables without importing each other. Tables are
created with ``create_all`` (which never drops or alters); the schema version in
``tt_meta`` guards against a newer workspace being opened by older code.
"""

from __future__ import annotations

import json
import sqlite3
import time
from datetime import UTC, datetime

from sqlalchemy import Column, MetaData, String, Table, Text, create_engine, event, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.types import TypeDecorator

from trainteam.core import dbread
from trainteam.core.dbread import SCHEMA_VERSION  # noqa: F401  (defined there so readers need no SQLAlchemy)

metadata = MetaData()

meta_table = Table(
    "tt_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)


class JSONText(TypeDecorator):
    """JSON stored as text: identical on SQLite and Postgres, readable with any client."""

    impl = Text
    cache_ok = True

    def process_bind_param(self, value, dialect):
        return None if value is None else json.dumps(value, sort_keys=True, default=str)

    def process_result_value(self, value, dialect):
        return None if value is None else json.loads(value)


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def make_engine(url: str) -> Engine:
    if url.startswith("sqlite"):
        dbread.hold(dbread.sqlite_path(url))
        engine = create_engine(url, connect_args={"timeout": 30})

        @event.listens_for(engine, "connect")
        def _pragmas(dbapi_conn, _record):  # several processes share the file
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA busy_timeout=30000")
            _wal_mode(cur)
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        return engine
    if url.startswith("postgresql://") or url.startswith("postgres://"):
        url = "postgresql+psycopg://" + url.split("://", 1)[1]  # psycopg 3 is installed (with DBOS), not psycopg2
    return create_engine(url, pool_pre_ping=True)


def _wal_mode(cur, wait_s: float = 30.0) -> None:
    """Switch the file to WAL, waiting out a neighbour doing the same.

    Turning a new file to WAL needs an exclusive lock and SQLite answers "database is
    locked" at once instead of calling the busy handler; eight processes opening one new
    workspace together hit it about once in 50 tries (measured, tests/engine/test_schema_race.py).
    """
    deadline = time.monotonic() + wait_s
    pause = 0.005
    while True:
        try:
            cur.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(pause)
            pause = min(pause * 2, 0.2)


class SchemaTooNew(RuntimeError):
    pass


def _table_set() -> str:
    return ",".join(sorted(metadata.tables))


def ensure_schema(engine: Engine) -> int:
    """Create missing tables; never drop or rewrite existing data. Returns the version.

    A workspace whose recorded version and table set match this code is opened with one
    query (short commands open it on every call); otherwise ``create_all`` adds what is missing.
    """
    try:
        with engine.connect() as conn:
            rows = dict(conn.execute(select(meta_table.c.key, meta_table.c.value)).all())
        if rows.get("schema_version") == str(SCHEMA_VERSION) and rows.get("tables") == _table_set():
            return SCHEMA_VERSION
    except (OperationalError, ProgrammingError):
        pass  # a new workspace: no tt_meta yet
    _create_missing_tables(engine)
    try:
        with engine.begin() as conn:
            conn.execute(meta_table.insert().values(key="schema_version", value=str(SCHEMA_VERSION)))
    except IntegrityError:
        pass  # already recorded (by us earlier, or by another process just now)
    with engine.connect() as conn:
        found = int(conn.execute(select(meta_table.c.value).where(meta_table.c.key == "schema_version")).scalar_one())
        if found > SCHEMA_VERSION:
            raise SchemaTooNew(
                f"workspace schema version {found} is newer than this trainteam ({SCHEMA_VERSION}); upgrade trainteam"
            )
    # Future migrations from `found` to SCHEMA_VERSION go here, additive only.
    try:
        with engine.begin() as conn:
            conn.execute(meta_table.delete().where(meta_table.c.key == "tables"))
            conn.execute(meta_table.insert().values(key="tables", value=_table_set()))
    except IntegrityError:
        pass  # another process recorded the same set at the same moment
    return found


def _create_missing_tables(engine: Engine) -> None:
    """``create_all`` under a database-wide write lock, so that check-then-create is atomic.

    Two processes opening a new workspace at once (a run starting while `approvals list`
    polls) otherwise both see a table missing and the second CREATE fails with "already
    exists" — retrying only moved the collision to the next table (CI, 2026-12-01). SQLite
    and Postgres both run DDL inside a transaction, so the loser waits for the winner's
    commit and then finds every table present.
    """
    with engine.connect() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql("BEGIN IMMEDIATE")  # waits up to busy_timeout for the writer
        elif engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(7471020)")  # 'tt' schema lock
        metadata.create_all(conn)
        conn.commit()
