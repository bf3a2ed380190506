"""Every YAML the product reads goes through one loader (``trainteam.core.inputfiles.load_yaml``): bounded,
safe, and refusing a key given twice. An AST scan: no product module outside it calls PyYAML's loading
functions (``yaml.safe_load``, ``yaml.load``, ...) or builds one of its loaders."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("trainteam", "agents", "workflows", "curation", "trainers", "graph")
LOADER = Path("trainteam/core/inputfiles.py")
_LOADING = {
    "safe_load",
    "load",
    "full_load",
    "unsafe_load",
    "load_all",
    "safe_load_all",
    "full_load_all",
    "unsafe_load_all",
    "compose",
    "compose_all",
    "SafeLoader",
    "CSafeLoader",
    "Loader",
    "CLoader",
    "FullLoader",
    "UnsafeLoader",
}


def yaml_loads(tree: ast.AST) -> list[int]:
    """Lines that call or name one of PyYAML's loading entry points (``yaml.X`` or ``from yaml import X``)."""
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr in _LOADING
            and isinstance(node.value, ast.Name)
            and node.value.id == "yaml"
        ):
            found.append(node.lineno)
        elif isinstance(node, ast.ImportFrom) and node.module == "yaml":
            found += [node.lineno for a in node.names if a.name in _LOADING]
    return sorted(found)


def test_yaml_is_read_only_through_the_one_loader():
    found = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel != LOADER:
                found += [f"{rel}:{line}" for line in yaml_loads(ast.parse(path.read_text()))]
    assert not found, f"YAML loaded outside {LOADER} (use load_yaml / load_yaml_file): {found}"


def test_the_scan_catches_what_it_forbids():
    bad = ast.parse(
        "import yaml\nfrom yaml import safe_load\nx = yaml.safe_load(t)\ny = yaml.load(t, yaml.SafeLoader)\n"
    )
    assert yaml_loads(bad) == [2, 3, 4, 4]
    assert yaml_loads(ast.parse("import yaml\ns = yaml.safe_dump(d)\nn = yaml.ScalarNode\n")) == []
