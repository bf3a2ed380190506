"""Suite-wide settings: offline, quiet, one torch thread per test process (2 shared cores); the real-model fixture."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRAINTEAM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))  # shared helpers by name: local_http

import pytest  # noqa: E402
from pg_server import PgServer, PgUnavailable  # noqa: E402
from real_model import ensure_real_model  # noqa: E402


@pytest.fixture(scope="session")
def real_model() -> Path:
    """SmolLM2-135M-Instruct as a local safetensors folder (imported once into the test cache: tests/real_model.py)."""
    return ensure_real_model()


@pytest.fixture(scope="session")
def pg_server():
    """A throwaway PostgreSQL server for the session (tests/pg_server.py). One that cannot start
    fails the tests that need it, with the reason: a skip would hide the gap."""
    try:
        server = PgServer.start()
    except PgUnavailable as exc:
        pytest.fail(f"PostgreSQL: {exc}", pytrace=False)
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def database(request, monkeypatch) -> str:
    """The workspace database a test runs on: its own SQLite files, or a fresh Postgres database
    for trainteam's tables and DBOS's (TRAINTEAM_DATABASE_URL, TRAINTEAM_DBOS_DATABASE_URL, which
    the test's subprocesses inherit)."""
    if request.param == "sqlite":
        return "sqlite"
    url = request.getfixturevalue("pg_server").new_database()
    monkeypatch.setenv("TRAINTEAM_DATABASE_URL", url)
    monkeypatch.setenv("TRAINTEAM_DBOS_DATABASE_URL", url)
    return url
