"""A throwaway PostgreSQL 15 cluster for tests and benchmarks: a temp folder, a free 127.0.0.1 port.

``PgServer.start()`` runs Debian's ``initdb`` / ``pg_ctl`` (``make postgres`` installs them in CI);
PostgreSQL refuses to run as root, so as root they run as the ``postgres`` user (``runuser``) on a
folder it owns. ``new_database()`` gives each test its own database. A server that cannot start
raises ``PgUnavailable`` with the reason: the tests that need it fail, never skip.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

PG_ROOT = Path("/usr/lib/postgresql")  # Debian's versioned server folders: 15/bin, 17/bin, ...


class PgUnavailable(RuntimeError):
    pass


def find_bin() -> Path:
    """The folder holding initdb and pg_ctl: Debian's versioned folder, or PATH."""
    versions = sorted(PG_ROOT.glob("*/bin/initdb"), key=lambda p: int(p.parts[-3]) if p.parts[-3].isdigit() else 0)
    if versions:
        return versions[0].parent  # the oldest: 15 here, as on Debian bookworm
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise PgUnavailable(
        "PostgreSQL server binaries not found (initdb): run `make postgres` "
        "(apt-get install postgresql) — the Postgres tests need a real server"
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgServer:
    def __init__(self, bindir: Path, root: Path, port: int, user: str | None):
        self.bindir, self.root, self.port, self.user = bindir, root, port, user
        self.data = root / "data"

    @classmethod
    def start(cls) -> PgServer:
        bindir = find_bin()
        root = Path(tempfile.mkdtemp(prefix="tt-pg-"))
        user = None
        if os.getuid() == 0:  # postgres refuses root: run it as the postgres user, on a folder it owns
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise PgUnavailable("running as root and there is no `postgres` user to run the server as") from None
            os.chown(root, pw.pw_uid, pw.pw_gid)
            user = "postgres"
        server = cls(bindir, root, _free_port(), user)
        server._run("initdb", "-D", str(server.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = (
            f"-c listen_addresses=127.0.0.1 -c port={server.port} -c unix_socket_directories='' "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        server._run(
            "pg_ctl", "-D", str(server.data), "-l", str(root / "server.log"), "-o", options, "-w", "-t", "60", "start"
        )
        return server

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bindir / tool), *args]
        if self.user is not None:
            cmd = ["runuser", "-u", self.user, "--", *cmd]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=self.root)
        if proc.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-1500:] if log.exists() else ""
            raise PgUnavailable(f"{tool} failed ({proc.returncode}): {proc.stderr[-1500:]}{tail}")

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def new_database(self, prefix: str = "t") -> str:
        """A fresh, empty database; returns its URL."""
        import psycopg

        name = f"{prefix}_{secrets.token_hex(6)}"
        with psycopg.connect(f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        except PgUnavailable:
            pass
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> PgServer:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()
