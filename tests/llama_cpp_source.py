"""llama.cpp's own GGUF converter, from the package registry, for tests that compare trainteam's GGUF with it.

llama.cpp's converter (``convert_hf_to_gguf.py`` with its ``conversion/`` package and the ``gguf-py`` it is written
against) is not a library on the registry; the one registry package that carries it is llama-cpp-python's source
distribution (``vendor/llama.cpp``). It is fetched once (pinned), and only the converter's files are kept, in
``~/.cache/trainteam-tests/llama-cpp-<version>/``. The converter imports ``sentencepiece`` before it looks for a
SentencePiece model (SmolLM2 has none, so it falls back to the BPE path); its pinned wheel is unpacked beside it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

from real_model import cache_dir

LLAMA_CPP_PYTHON = "llama-cpp-python==0.3.36"
SENTENCEPIECE = "sentencepiece==0.2.3"
KEEP = ("vendor/llama.cpp/convert_hf_to_gguf.py", "vendor/llama.cpp/conversion/", "vendor/llama.cpp/gguf-py/")


def _download(spec: str, folder: Path, binary: bool) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    kind = "--only-binary=:all:" if binary else "--no-binary=:all:"
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", kind, spec, "-d", str(folder)],
                   check=True, capture_output=True, timeout=900)
    (found,) = [p for p in folder.iterdir() if p.name.lower().startswith(spec.split("==")[0].replace("-", "_"))]
    return found


def converter() -> Path:
    """The folder holding ``convert_hf_to_gguf.py`` (fetched and unpacked on the first call)."""
    home = cache_dir() / "llama-cpp-0.3.36"
    done = home / "done"
    root = home / "llama.cpp"
    if done.exists():
        return root
    downloads = home / "downloads"
    sdist = _download(LLAMA_CPP_PYTHON, downloads, binary=False)
    with tarfile.open(sdist) as tar:
        prefix = tar.getnames()[0].split("/")[0] + "/"
        members = [m for m in tar.getmembers() if m.name.removeprefix(prefix).startswith(KEEP) and m.isfile()]
        for m in members:
            m.name = m.name.removeprefix(prefix + "vendor/")
        tar.extractall(home, members=members, filter="data")
    with zipfile.ZipFile(_download(SENTENCEPIECE, downloads, binary=True)) as whl:
        whl.extractall(home / "site")
    for p in downloads.iterdir():
        p.unlink()
    done.write_text("ok\n")
    return root


def convert(folder: Path, out: Path, outtype: str) -> subprocess.CompletedProcess:
    """llama.cpp's converter on ``folder`` into ``out`` (f16 or q8_0), in a subprocess on its own gguf-py."""
    root = converter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "gguf-py"), str(root.parent / "site")])}
    return subprocess.run([sys.executable, str(root / "convert_hf_to_gguf.py"), str(folder), "--outfile", str(out),
                           "--outtype", outtype], capture_output=True, text=True, env=env, timeout=900)
