"""A workspace: one folder holding the database and the artifacts tree.

Everything a run produces lives under one root (``--workspace`` or
``TRAINTEAM_HOME``, default ``./.trainteam``) so that a workspace can be copied,
archived or deleted as a unit.

Opening refuses, with one line and before anything is written, a workspace this user cannot
write (a probe file is created and removed: root passes any permission bits, so ``os.access``
cannot tell) and a damaged database (``trainteam.core.dbread.check_database``). Once the schema
exists ``workspace.json`` records it, so that a zero-byte ``trainteam.db`` is refused instead of
being recreated empty; a brand-new workspace that several processes create at once has a
zero-byte file and no record yet, and is created as before.
"""

from __future__ import annotations

import json
import os
import secrets
from functools import cached_property
from pathlib import Path

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DatabaseError

# The stores are imported for their tables too: each adds its own to trainteam.core.db.metadata,
# which ensure_schema creates.
import trainteam.trainers.serving.registry  # noqa: F401
import trainteam.workflows.engine.store  # noqa: F401
from trainteam.core import dbread
from trainteam.core.db import SchemaTooNew, ensure_schema, make_engine, utcnow
from trainteam.core.errors import BadInput
from trainteam.graph import KnowledgeGraph
from trainteam.settings import Settings

ARTIFACT_DIRS = ("datasets", "tokenizers", "checkpoints", "models", "transcripts", "reports", "logs")


class Workspace:
    def __init__(self, root: Path, settings: Settings):
        self.root = root
        self.settings = settings

    @classmethod
    def open(cls, root: str | Path | None = None, settings: Settings | None = None) -> Workspace:
        settings = settings or Settings()
        root_path = Path(root) if root is not None else settings.home
        if root_path.exists() and not root_path.is_dir():
            raise BadInput(f"workspace: {root_path} exists and is not a folder")
        root_path = root_path.resolve()
        try:
            root_path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise BadInput(
                f"workspace: cannot create {root_path} ({exc.strerror}); choose another --workspace"
            ) from None
        ws = cls(root_path, settings)
        ws.check_database()
        ws.check_writable()
        ws.check_dbos_database(runs=False)
        for d in ARTIFACT_DIRS:
            (root_path / d).mkdir(exist_ok=True)
        try:
            ensure_schema(ws.engine)
        except SchemaTooNew as exc:
            raise BadInput(f"workspace {root_path}: {exc}") from None
        except DatabaseError:
            found = dbread.diagnose([ws.database_path] if ws.database_path else [])
            if found is None:
                raise
            raise BadInput(found) from None
        ws._record_schema()
        ws.check_dbos_database()
        return ws

    @property
    def database_path(self) -> Path | None:
        """The workspace database's file when it is SQLite."""
        return dbread.sqlite_path(self.database_url)

    @property
    def marker(self) -> Path:
        return self.root / dbread.MARKER

    def check_database(self) -> None:
        """A damaged trainteam.db is one line (zero bytes counts once the schema was recorded)."""
        if self.database_path is not None:
            dbread.check_database(
                self.database_path,
                must_hold_data=self.marker.is_file(),
                why_data=f"{dbread.MARKER} says its schema was created",
            )

    def check_dbos_database(self, runs: bool = True) -> None:
        """A damaged dbos.sqlite is one line, before DBOS opens it (``engine.launch`` calls this).
        Zero bytes counts when the workspace has runs (``runs``: ask the database)."""
        path = dbread.sqlite_path(self.dbos_database_url)
        if path is None:
            return
        dbread.check_database(
            path,
            must_hold_data=(lambda: self._runs_exist()) if runs else False,
            why_data="the workspace has runs",
            wait_s=1.0,
        )
        dbread.hold(path)  # DBOS opens it next (engine.launch): no plain open() of it after this
        if path.exists() and not _can_write(path):
            raise BadInput(
                f"workspace {self.root} is read-only: {path.name} cannot be written by this user; "
                "make it writable, or choose another --workspace"
            )

    def _runs_exist(self) -> bool:
        from sqlalchemy import text

        try:
            with self.engine.connect() as conn:
                return conn.execute(text("SELECT 1 FROM runs LIMIT 1")).first() is not None
        except DatabaseError:
            return False

    def check_writable(self) -> None:
        """Create and remove a probe file (root ignores permission bits), and open the database
        file for writing (without writing): a read-only workspace is one line at open."""
        probe = self.root / f".write-probe-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            os.close(fd)
            probe.unlink()
        except OSError as exc:
            raise BadInput(
                f"workspace {self.root} is read-only: cannot create a file in it ({exc.strerror}); "
                "make it writable for this user, or choose another --workspace"
            ) from None
        db = self.database_path
        if db is not None and db.exists() and not _can_write(db):
            raise BadInput(
                f"workspace {self.root} is read-only: {db.name} cannot be written by this user; "
                "make it writable, or choose another --workspace"
            )

    def _record_schema(self) -> None:
        """Write ``workspace.json`` once (atomically) when the workspace's own SQLite schema exists."""
        if self.marker.is_file() or self.database_path is None:
            return
        tmp = self.root / f".{dbread.MARKER}.{os.getpid()}.tmp"
        tmp.write_text(json.dumps({"schema_created": utcnow(), "database": str(self.database_path)}, indent=1) + "\n")
        os.replace(tmp, self.marker)

    @property
    def database_url(self) -> str:
        return self.settings.database_url or f"sqlite:///{self.root / 'trainteam.db'}"

    @property
    def dbos_database_url(self) -> str:
        return self.settings.dbos_database_url or f"sqlite:///{self.root / 'dbos.sqlite'}"

    @cached_property
    def engine(self) -> Engine:
        return make_engine(self.database_url)

    def dir(self, kind: str) -> Path:
        if kind not in ARTIFACT_DIRS:
            raise ValueError(f"unknown artifact folder {kind!r}")
        return self.root / kind

    @cached_property
    def graph(self):
        return KnowledgeGraph(self.engine)


def _can_write(path: Path) -> bool:
    """Whether this process may write ``path``. ``access`` rather than opening it: closing a
    descriptor of a SQLite file drops this process's locks on it (see ``dbread._HELD``); it
    honours a read-only mount, and root's bits when root lacks CAP_DAC_OVERRIDE."""
    return os.access(path, os.W_OK)
