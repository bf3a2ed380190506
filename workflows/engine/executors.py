"""Executor ids, and whether the process behind one is alive — across hosts, without PIDs.

Every process that launches the workflow engine holds a *lease* on its executor id for as long
as it lives, taken from something the operating system or the database server lets go of when
the process dies, however it dies (kill -9 included):

- Postgres workspace: a session advisory lock on the workspace database, held by one connection
  of the process. When the process (or its machine) is gone, the server ends the session and
  the lock with it; any host reads ``pg_locks``.
- SQLite workspace: an exclusive ``flock`` on ``executors/<id>.lock`` beside the database file
  (one machine holds a SQLite database anyway).

A worker hands the pending runs of an executor whose lease is free to DBOS's recovery
(``engine.recover_dead``); DBOS then gives each to exactly one live worker through its queue.
Light on purpose: the short commands' views read liveness through the stores.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import socket
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # SQLAlchemy only for the types: the short commands import this module
    from sqlalchemy.engine import Connection, Engine

APP_NAME = "trainteam"  # the DBOS application
WORKFLOW_NAME = "trainteam.run"  # the one DBOS workflow: a run
RUN_QUEUE = "trainteam-runs"  # the DBOS queue `execute-workflow --detach` puts runs on; workers take them
_PG_CLASS = 7471021  # the advisory-lock class of executor leases (7471020 is the schema lock)


def new_executor_id() -> str:
    # Unique per launched process: two processes sharing DBOS's default "local"
    # id would both run the same pending step.
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def _pg_key(executor_id: str) -> int:
    return int.from_bytes(hashlib.sha256(executor_id.encode()).digest()[:4], "big", signed=True)


def lock_path(db_path: Path, executor_id: str) -> Path:
    safe = executor_id.replace("/", "_")
    return Path(db_path).parent / "executors" / f"{safe}.lock"


class Lease:
    """This process's hold on its executor id; released by ``release()`` or by dying."""

    def __init__(
        self, executor_id: str, fd: int | None = None, conn: Connection | None = None, path: Path | None = None
    ) -> None:
        self.executor_id, self._fd, self._conn, self._path = executor_id, fd, conn, path

    @classmethod
    def hold(cls, engine: Engine, executor_id: str) -> Lease:
        if engine.dialect.name == "postgresql":
            conn = engine.connect().execution_options(isolation_level="AUTOCOMMIT")
            conn.exec_driver_sql(f"SELECT pg_advisory_lock({_PG_CLASS}, {_pg_key(executor_id)})")
            return cls(executor_id, conn=conn)
        database = engine.url.database
        if database is None:  # `sqlite://`, no file: Path(None) failed here with this TypeError, unexplained
            raise TypeError("an executor's lease is a lock file beside the SQLite database, which has no file")
        path = lock_path(Path(database), executor_id)
        path.parent.mkdir(exist_ok=True)
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)  # blocking: a probe holds its shared lock for microseconds
        return cls(executor_id, fd=fd, path=path)

    def release(self) -> None:
        if self._conn is not None:
            self._conn.close()  # the session ends: the lock goes with it
            self._conn = None
        if self._fd is not None:
            try:
                if self._path is not None:
                    self._path.unlink()
            except OSError:
                pass
            os.close(self._fd)
            self._fd = None


def alive_sqlite(db_path: Path | None, executor_id: str | None) -> bool:
    """True while the process holding ``executor_id``'s lock file lives (this one included)."""
    if not executor_id or db_path is None:
        return False
    path = lock_path(db_path, executor_id)
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False  # never held here, or released by a clean exit
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops the probe's own lock
    return False


PG_ALIVE_SQL = (
    f"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND classid = {_PG_CLASS}::oid "
    "AND objid = %s::oid AND objsubid = 2 AND granted AND database = "
    "(SELECT oid FROM pg_database WHERE datname = current_database())"
)


def pg_objid(executor_id: str) -> int:
    """``pg_locks.objid`` of the lease: the key as an unsigned 32-bit oid."""
    return _pg_key(executor_id) & 0xFFFFFFFF
