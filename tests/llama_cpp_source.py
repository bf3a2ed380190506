"""llama.cpp from the package registry, for tests: its own GGUF converter, and (slow) its runtime built from source.

llama.cpp's converter (``convert_hf_to_gguf.py`` with its ``conversion/`` package and the ``gguf-py`` it is written
against) is not a library on the registry; the one registry package that carries it is llama-cpp-python's source
distribution (``vendor/llama.cpp``). It is fetched once (pinned), and only the converter's files are kept, in
``~/.cache/trainteam-tests/llama-cpp-<version>/``. The converter imports ``sentencepiece`` before it looks for a
SentencePiece model (SmolLM2 has none, so it falls back to the BPE path); its pinned wheel is unpacked beside it.

``llama_cpp_tools()`` builds llama.cpp's ``llama-simple`` (greedy generation until an end-of-generation token) and
``llama-tokenize`` from the same source with cmake (no wheel of llama.cpp installs here: llama-cpp-python has none
for this platform, and llama-cpp-cffi's CPU build needs a newer libstdc++ than the machine's); about 7 CPU-minutes,
cached.
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


def _sdist_tree(home: Path) -> Path:
    """The whole vendored llama.cpp source, unpacked once (the build needs more than the converter's files)."""
    src = home / "src" / "llama.cpp"
    if (src / "CMakeLists.txt").is_file():
        return src
    downloads = home / "downloads"
    sdist = _download(LLAMA_CPP_PYTHON, downloads, binary=False)
    with tarfile.open(sdist) as tar:
        prefix = tar.getnames()[0].split("/")[0] + "/vendor/"
        members = [m for m in tar.getmembers() if m.name.startswith(prefix + "llama.cpp/")]
        for m in members:
            m.name = m.name.removeprefix(prefix)
        tar.extractall(home / "src", members=members, filter="data")
    sdist.unlink()
    return src


def llama_cpp_tools() -> dict[str, Path]:
    """``{"simple": ..., "tokenize": ...}``: llama.cpp's binaries, built once from the registry's source."""
    home = cache_dir() / "llama-cpp-0.3.36"
    bins = {"simple": home / "bin" / "llama-simple", "tokenize": home / "bin" / "llama-tokenize"}
    if all(p.is_file() for p in bins.values()):
        return bins
    src, build = _sdist_tree(home), home / "build"
    flags = ["-DCMAKE_BUILD_TYPE=Release", "-DLLAMA_CURL=OFF", "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_SERVER=OFF",
             "-DBUILD_SHARED_LIBS=OFF"]
    subprocess.run(["cmake", "-S", str(src), "-B", str(build), *flags], check=True, capture_output=True, timeout=900)
    subprocess.run(["cmake", "--build", str(build), "--target", "llama-simple", "llama-tokenize", "-j2"], check=True,
                   capture_output=True, timeout=3600)
    (home / "bin").mkdir(exist_ok=True)
    for target in bins.values():
        (build / "bin" / target.name).replace(target)
    return bins


def convert(folder: Path, out: Path, outtype: str) -> subprocess.CompletedProcess:
    """llama.cpp's converter on ``folder`` into ``out`` (f16 or q8_0), in a subprocess on its own gguf-py."""
    root = converter()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "gguf-py"), str(root.parent / "site")])}
    return subprocess.run([sys.executable, str(root / "convert_hf_to_gguf.py"), str(folder), "--outfile", str(out),
                           "--outtype", outtype], capture_output=True, text=True, env=env, timeout=900)
