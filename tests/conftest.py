"""Suite-wide settings: offline, quiet, one torch thread per test process (2 shared cores); the real-model fixture."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRAINTEAM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
# The planner's throughput measurements (trainers/planning/calibrate.py) are cached outside any workspace;
# each test process gets its own empty cache, so a measurement taken under one test's load never plans
# another test's run (nor a person's run after the suite).
import tempfile  # noqa: E402

os.environ["TRAINTEAM_CACHE_DIR"] = tempfile.mkdtemp(prefix="trainteam-test-cache-")

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))  # shared helpers by name: local_http

import pytest  # noqa: E402
from pg_server import PgServer, PgUnavailable  # noqa: E402
from real_model import ensure_real_model  # noqa: E402

pytest_plugins = ["model_fixtures"]  # tests/model_fixtures.py: the tiny tokenizer, models and checkpoints


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


# The files that take a minute or more (their shared fixtures included), measured on the 2-core machine with
# --durations: started first, so the two xdist workers (Makefile `test`, --dist loadfile) end together
# instead of one of them starting a two-minute file when everything else is done.
LONGEST_FIRST = ("tests/real/test_real_model_runs.py", "tests/engine/test_trustworthy_runs.py",
                 "tests/task/test_hostile_inputs.py", "tests/engine/test_durability.py",
                 "tests/engine/test_model_decisions.py", "tests/engine/test_curriculum_run.py",
                 "tests/agents/test_self_improve.py", "tests/task/test_validate.py",
                 "tests/engine/test_distributed_run.py", "tests/task/test_precheck.py", "tests/steps/test_slice.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))  # stable: the rest keep their order


def pytest_configure(config):
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False  # xdist would sort files by test count; keep the order above


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return tmp_path / "ws"


@pytest.fixture
def background():
    """Runs started in the background: a failing test does not leave one waiting for a person."""
    started = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
