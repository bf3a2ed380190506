"""The product code passes its linter, its formatter and its type checker, configured in pyproject.toml.

The product code is the folders of pyproject's package-dir (trainteam/, agents/, workflows/, trainers/, curation/,
graph/, and the data folders prompts/ and skills/). Each tool runs as a subprocess, as a person would run it, and
a finding fails the test with the tool's own output.

mypy cannot follow setuptools' editable import hook, by which ``agents/`` is imported as ``trainteam.agents``: it
checks a tree of links laid out as installed (``build/typecheck/trainteam/agents -> agents/`` ...), built afresh
on each run, with ``mypy -p trainteam``; its paths are written back as the repository's. Its cache stays in
``build/typecheck/.mypy_cache``: a warm run takes ~3 s, a cold one ~25 s.

``test_tools_catch_a_fake_tree`` shows that each check fails on a small tree built to break it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_layering import ROOT, package_dirs

TYPECHECK = Path("build") / "typecheck"


def product_folders(root: Path = ROOT) -> list[str]:
    """The folders installed as the package trainteam (pyproject's package-dir), as ruff takes them."""
    return sorted({folder for folder in package_dirs(root).values() if (root / folder).is_dir()})


def _run(cmd: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)


def ruff_check(root: Path = ROOT) -> str:
    """ruff's lint findings on the product folders ('' when clean)."""
    proc = _run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", *product_folders(root)],
        root,
    )
    return "" if proc.returncode == 0 else (proc.stdout + proc.stderr).strip()


def ruff_format_check(root: Path = ROOT) -> str:
    """The product files ruff's formatter would change ('' when none)."""
    proc = _run(
        [
            sys.executable,
            "-m",
            "ruff",
            "format",
            "--check",
            "--no-cache",
            "--output-format",
            "concise",
            *product_folders(root),
        ],
        root,
    )
    return "" if proc.returncode == 0 else (proc.stdout + proc.stderr).strip()


def link_tree(root: Path = ROOT) -> Path:
    """build/typecheck/trainteam: the package as installed, its subpackages links to their folders."""
    links: dict[str, Path] = {}
    for package, folder in package_dirs(root).items():
        if package == "trainteam":
            links.update({p.name: p for p in (root / folder).iterdir() if p.name != "__pycache__"})
        elif package.count(".") == 1 and (root / folder).is_dir():
            links[package.split(".")[1]] = root / folder
    tree = root / TYPECHECK / "trainteam"
    tree.mkdir(parents=True, exist_ok=True)
    for old in tree.iterdir():  # a link to a module gone or moved, or anything not a link
        if not old.is_symlink() or links.get(old.name) != old.readlink():
            shutil.rmtree(old) if old.is_dir() and not old.is_symlink() else old.unlink()
    for name, target in links.items():
        if not (tree / name).is_symlink():
            (tree / name).symlink_to(target)
    return tree


def _repo_path(line: str, root: Path) -> str:
    """A mypy line's path in the link tree, written as the repository's path (trainteam/agents/x.py -> agents/x.py)."""
    for package, folder in sorted(package_dirs(root).items(), key=lambda kv: -len(kv[0])):
        prefix = package.replace(".", "/") + "/"
        if line.startswith(prefix):
            return folder + "/" + line[len(prefix) :]
    return line


def mypy_check(root: Path = ROOT, cache: Path | None = None) -> tuple[str, int]:
    """mypy's findings on the package trainteam ('' when clean) and how many source files it checked."""
    tree = link_tree(root)
    config, cache = root / "pyproject.toml", cache or root / TYPECHECK / ".mypy_cache"
    cmd = [sys.executable, "-m", "mypy", "--config-file", str(config), "--cache-dir", str(cache), "-p", "trainteam"]
    proc = _run(cmd, tree.parent)
    lines = (proc.stdout + proc.stderr).strip().splitlines()
    summary = re.search(r"(\d+) source files?\)?$", lines[-1] if lines else "")  # "Success: ..." or "Found ..."
    if summary:
        lines = lines[:-1]
    findings = "\n".join(_repo_path(line, root) for line in lines)
    if proc.returncode != 0 and not findings:
        findings = f"mypy exited {proc.returncode} without a finding"
    checked = int(summary.group(1)) if summary else 0
    return findings, checked


def _product_py_files(root: Path) -> list[Path]:
    return [
        p for folder in product_folders(root) for p in (root / folder).rglob("*.py") if "__pycache__" not in p.parts
    ]


def _fail(title: str, output: str) -> None:
    pytest.fail(f"{title}:\n{output}", pytrace=False)


# -- the project -------------------------------------------------------------------------------------


def test_ruff_finds_nothing():
    out = ruff_check()
    if out:
        _fail("ruff check (run `ruff check --fix` for the [*] ones)", out)


def test_ruff_format_changes_nothing():
    out = ruff_format_check()
    if out:
        _fail("files `ruff format` would change (run it on them)", out)


def test_mypy_finds_nothing():
    out, checked = mypy_check()
    assert checked >= len(_product_py_files(ROOT)), (
        "mypy checked fewer files than the product holds: is the link tree right?"
    )
    if out:
        _fail("mypy (run through this test: it checks build/typecheck/trainteam, the package as installed)", out)


# -- each check can fail -----------------------------------------------------------------------------

FAKE = {
    "trainteam/__init__.py": "",
    "trainteam/core/__init__.py": "",
    "trainteam/core/nums.py": "def one() -> int:\n    return 1\n",
    "agents/__init__.py": "",
    # an unused import (ruff), a dict spelled over several lines (the formatter), and a str bound to the int
    # that trainteam.core.nums returns: found only if trainteam.agents -> agents/ and trainteam.core are
    # both resolved (an unresolved import would be typed Any and pass)
    "agents/bad.py": (
        "import os\n\nfrom trainteam.core.nums import one\n\nX = {'a':1,\n  'b':2}\n\n\n"
        "def name() -> str:\n    return one()\n"
    ),
    "graph/__init__.py": "",
    "graph/good.py": '"""Clean."""\n\nfrom trainteam.agents.bad import name\n\nNAME: str = name()\n',
}


def test_tools_catch_a_fake_tree(tmp_path):
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    for rel, text in FAKE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)

    assert product_folders(tmp_path) == ["agents", "graph", "trainteam"]
    lint = ruff_check(tmp_path)
    assert "agents/bad.py:1:8: F401" in lint and "graph/" not in lint
    assert ruff_format_check(tmp_path).splitlines() == [
        "agents/bad.py:5:6: unformatted: File would be reformatted",
        "1 file would be reformatted, 6 files already formatted",
    ]
    out, checked = mypy_check(tmp_path, cache=ROOT / TYPECHECK / ".mypy_cache_fake")
    assert checked == len(FAKE)
    assert re.fullmatch(
        r'agents/bad\.py:10: error: Incompatible return value type \(got "int", expected "str"\)'
        r"  \[return-value\]",
        out,
    ), out
