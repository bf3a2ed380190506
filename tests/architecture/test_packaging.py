"""A wheel built from the tree installs the one `trainteam` namespace with its data files."""

from __future__ import annotations

import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_subpackage_folder_is_listed_in_pyproject():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    for name, folder in cfg["package-dir"].items():
        for init in (ROOT / folder).rglob("__init__.py"):
            rel = init.parent.relative_to(ROOT / folder)
            dotted = ".".join([name, *rel.parts]) if rel.parts else name
            assert dotted in listed, f"{init.parent} has an __init__.py but {dotted} is not in pyproject packages"


def test_wheel_imports_every_subpackage_and_reads_bundled_data(tmp_path):
    out = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    wheel = next(out.glob("trainteam-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert top == {"trainteam"}, f"generic top-level modules installed: {top - {'trainteam'}}"
    assert "trainteam/workflows/train_model.yaml" in names
    assert "trainteam/workflows/examples/addition.yaml" in names

    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = (
        "import sys; sys.path.insert(0, sys.argv[1])\n"
        "import importlib, importlib.resources as r\n"
        "for m in ['trainteam', 'trainteam.agents', 'trainteam.graph', 'trainteam.workflows', 'trainteam.curation',"
        " 'trainteam.trainers', 'trainteam.prompts', 'trainteam.skills', 'trainteam.cli']:\n"
        "    mod = importlib.import_module(m)\n"
        "    assert mod.__file__.startswith(sys.argv[1]), (m, mod.__file__)\n"
        "from trainteam.workflows.engine.spec import load_builtin\n"
        "print(len(load_builtin('train_model').steps))\n"
        "print(r.files('trainteam.workflows').joinpath('examples/addition.yaml').read_text().count('demo: addition'))\n"
    )
    proc = subprocess.run([sys.executable, "-c", probe, str(site)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        str(len(__import__("trainteam.workflows.engine.spec", fromlist=["x"]).load_builtin("train_model").steps)),
        "1",
    ]
