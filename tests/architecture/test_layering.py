"""The renovation's shape, read from the source (AST, nothing imported): rooms import one way, no module
import cycle, no function over 80 lines, no two modules with one file name.

Rooms, top to bottom (ARCHITECTURE.md):

    shell (trainteam.*: cli, commands, api, workspace, settings)
      -> workflows (all its subpackages) -> agents -> contract (trainteam.contract) -> trainers -> curation
    graph: imported by shell, workflows and agents only; imports only core
    core (trainteam.core): imported by everyone; imports nothing of the others

A module may import its own room and the rooms below it. ``prompts`` and ``skills`` hold data files read
with importlib.resources (their ``__init__`` only has a docstring): room ``data``, readable by everyone,
importing nothing, like core.

What counts as an import: every ``import`` / ``from ... import`` anywhere in a module: at the top, inside
functions (lazy imports), and under ``if TYPE_CHECKING:`` too (a type named in a signature is still a
dependency on its room; none of these blocks had to be exempted). A module that calls
``importlib.import_module`` also imports, by name, every project module (below ``trainteam`` itself) named by
one of its string constants (the lazy-export tables of the package ``__init__``s) and the package an f-string names
(``f"trainteam.commands.{name}"``). ``from pkg import name`` is an edge to ``pkg.name`` where that is a
module, else to ``pkg``.

Each check is a function of a source tree; ``test_checks_catch_a_fake_tree`` shows that each one fails on
a small tree built to break it.
"""

from __future__ import annotations

import ast
import functools
import tomllib
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_FUNCTION_LINES = 80
# Folders whose functions are not held to MAX_FUNCTION_LINES, and folders that are never project code.
UNBOUNDED = {"tests", "benchmarks"}
NOT_SOURCE = {"build", "__pycache__", "node_modules"}

ROOMS = ("shell", "workflows", "agents", "contract", "trainers", "curation", "graph", "core", "data")
ALLOWED = {  # room -> the rooms its modules may import
    "shell": set(ROOMS),
    "workflows": {"workflows", "agents", "contract", "trainers", "curation", "graph", "core", "data"},
    "agents": {"agents", "contract", "trainers", "curation", "graph", "core", "data"},
    "contract": {"contract", "trainers", "curation", "core", "data"},
    "trainers": {"trainers", "curation", "core", "data"},
    "curation": {"curation", "core", "data"},
    "graph": {"graph", "core"},
    "core": {"core"},
    "data": {"data"},
}
SUBPACKAGE_ROOMS = {
    "workflows": "workflows",
    "agents": "agents",
    "trainers": "trainers",
    "curation": "curation",
    "graph": "graph",
    "core": "core",
    "contract": "contract",
    "prompts": "data",
    "skills": "data",
}
MAX_FOLDER_MODULES = 25  # a room a newcomer can read the file list of
# The CLI command modules are named after the commands they register (trainteam/commands/curate.py
# registers `trainteam curate`), so they may share a file name with the module that does the work.
COMMANDS_DIR = Path("trainteam") / "commands"


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    how: str  # "top", "in function", "type checking", "by name"

    def __str__(self) -> str:
        return f"{self.source} -> {self.target} (line {self.line}, {self.how})"


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """pyproject's package-dir: import package -> folder (trainteam.agents -> agents)."""
    with open(root / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]["package-dir"]


def project_modules(root: Path, packages: dict[str, str]) -> dict[str, Path]:
    """Every module of the project by its import name (a package by its __init__.py)."""
    mods: dict[str, Path] = {}
    for package, folder in packages.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            mods[".".join([package, *parts])] = path
    return mods


def room(module: str) -> str:
    parts = module.split(".")
    return SUBPACKAGE_ROOMS.get(parts[1], "shell") if len(parts) > 1 else "shell"


def _resolve(module: str | None, level: int, current: str, is_package: bool) -> str:
    if not level:
        return module or ""
    base = current.split(".") if is_package else current.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _where(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    """'in function', 'type checking' (under ``if TYPE_CHECKING:``) or 'top' for an import statement."""
    how = "top"
    while node in parents:
        node = parents[node]
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            return "in function"
        if isinstance(node, ast.If) and "TYPE_CHECKING" in {
            getattr(node.test, "id", None),
            getattr(node.test, "attr", None),
        }:
            how = "type checking"
    return how


def _named_modules(tree: ast.Module, mods: dict[str, Path]) -> list[tuple[str, int]]:
    """Modules a module imports by name through importlib.import_module (see the module docstring)."""
    calls = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", None)) == "import_module"
    ]
    if not calls:
        return []
    named = [
        (n.value, n.lineno)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and "." in n.value and n.value in mods
    ]
    for n in ast.walk(tree):
        if isinstance(n, ast.JoinedStr) and n.values and isinstance(n.values[0], ast.Constant):
            prefix = str(n.values[0].value).rstrip(".")
            if prefix in mods:
                named.append((prefix, n.lineno))
    return named


def _parse(path: Path) -> ast.Module:
    """The module's syntax tree; empty for a file that went away since the scan (others edit this checkout)."""
    try:
        return ast.parse(path.read_text(), filename=str(path))
    except FileNotFoundError:
        return ast.Module(body=[], type_ignores=[])


def import_statements(name: str, path: Path):
    """(statement, the module a ``from`` names — relative imports resolved — or None, where) for each
    import statement of one module."""
    tree = _parse(path)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield node, None, _where(node, parents)
        elif isinstance(node, ast.ImportFrom):
            yield node, _resolve(node.module, node.level, name, is_package), _where(node, parents)


def module_imports(name: str, path: Path, mods: dict[str, Path]) -> list[Edge]:
    """The project modules one module imports (see the module docstring for what counts)."""
    edges = []
    for node, base, how in import_statements(name, path):
        if base is None:
            targets = [alias.name for alias in node.names]
        else:
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
        edges += [Edge(name, t, node.lineno, how) for t in targets if t.split(".")[0] == "trainteam"]
    edges += [Edge(name, target, line, "by name") for target, line in _named_modules(_parse(path), mods)]
    return [e for e in edges if e.target != name]


def all_imports(mods: dict[str, Path]) -> list[Edge]:
    return [edge for name, path in sorted(mods.items()) for edge in module_imports(name, path, mods)]


def upward_imports(edges: list[Edge]) -> list[Edge]:
    """The imports that reach a room the importing module's room may not import."""
    return [e for e in edges if room(e.target) not in ALLOWED[room(e.source)]]


def import_cycles(edges: list[Edge], mods: dict[str, Path]) -> list[list[str]]:
    """The strongly connected groups (two or more modules) of the module import graph."""
    graph = nx.DiGraph((e.source, e.target) for e in edges if e.target in mods)
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def source_files(root: Path) -> list[Path]:
    """The repository's .py files outside tests/, benchmarks/, build output and hidden folders."""
    files = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).parts[:-1]
        if parts and parts[0] in UNBOUNDED:
            continue
        if any(p.startswith(".") or p in NOT_SOURCE or p.endswith(".egg-info") for p in parts):
            continue
        files.append(path)
    return files


def long_functions(root: Path, files: list[Path], limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """'path:line name (N lines)' for each function longer than limit (def line to last line)."""
    found = []
    for path in files:
        for node in ast.walk(_parse(path)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > limit:
                    found.append(f"{path.relative_to(root)}:{node.lineno} {node.name} ({n} lines)")
    return found


def duplicate_names(root: Path, mods: dict[str, Path]) -> dict[str, list[str]]:
    """File name -> the modules that share it (packages' __init__ and the CLI command modules left out)."""
    by_name: dict[str, list[str]] = defaultdict(list)
    for path in mods.values():
        rel = path.relative_to(root)
        if path.name != "__init__.py" and rel.parent != COMMANDS_DIR:
            by_name[path.name].append(str(rel))
    return {name: sorted(paths) for name, paths in sorted(by_name.items()) if len(paths) > 1}


def crowded_folders(root: Path, files: list[Path], limit: int = MAX_FOLDER_MODULES) -> dict[str, int]:
    """Folder -> its number of modules (``__init__`` included), for each folder holding more than limit."""
    count: dict[str, int] = defaultdict(int)
    for path in files:
        count[str(path.parent.relative_to(root))] += 1
    return {folder: n for folder, n in sorted(count.items()) if n > limit}


def _edge_lines(edges: list[Edge]) -> list[str]:
    """One line per module -> target, with the lines that import it."""
    where: dict[tuple[str, str], list[str]] = defaultdict(list)
    for e in edges:
        if f"{e.line} {e.how}" not in where[e.source, e.target]:
            where[e.source, e.target].append(f"{e.line} {e.how}")
    return [f"{s} -> {t} (line {', '.join(w)})" for (s, t), w in sorted(where.items())]


def _listing(title: str, lines) -> str:
    lines = [str(x) for x in lines]
    return f"{title} ({len(lines)}):\n  " + "\n  ".join(lines)


# -- the project -------------------------------------------------------------------------------------


@functools.cache
def _project():
    mods = project_modules(ROOT, package_dirs())
    return mods, all_imports(mods)


def test_every_module_has_a_room():
    mods, _ = _project()
    assert len(mods) > 100, "the scan found too few modules: is package-dir read right?"
    assert {room(m) for m in mods} <= set(ROOMS)
    assert set(SUBPACKAGE_ROOMS) >= {p.split(".")[1] for p in package_dirs() if p.count(".") == 1}


def test_no_upward_import():
    _, edges = _project()
    bad = upward_imports(edges)
    if bad:
        pytest.fail(_listing("imports against the one-way rooms (module -> target)", _edge_lines(bad)), pytrace=False)


def test_no_import_cycle():
    mods, edges = _project()
    cycles = import_cycles(edges, mods)
    if cycles:
        pytest.fail(
            _listing(
                "modules that import each other (imports inside functions count)", [" <-> ".join(c) for c in cycles]
            ),
            pytrace=False,
        )


def test_no_long_function():
    found = long_functions(ROOT, source_files(ROOT))
    if found:
        pytest.fail(
            _listing(f"functions over {MAX_FUNCTION_LINES} lines outside tests/ and benchmarks/", found), pytrace=False
        )


def test_no_two_modules_share_a_file_name():
    mods, _ = _project()
    dups = duplicate_names(ROOT, mods)
    if dups:
        pytest.fail(
            _listing(
                "file names held by two modules (trainteam/commands/ left out)",
                [f"{name}: {', '.join(paths)}" for name, paths in dups.items()],
            ),
            pytrace=False,
        )


def test_no_folder_holds_more_than_25_modules():
    crowded = crowded_folders(ROOT, source_files(ROOT))
    if crowded:
        pytest.fail(
            _listing(
                f"folders of more than {MAX_FOLDER_MODULES} modules: split them by subject",
                [f"{folder}: {n}" for folder, n in crowded.items()],
            ),
            pytrace=False,
        )


# -- each check can fail -----------------------------------------------------------------------------

FAKE = {
    "trainteam/__init__.py": "",
    "trainteam/core/__init__.py": "",
    "trainteam/core/errors.py": "def f():\n    from trainteam.graph import g\n",  # core -> graph, in a function
    "trainteam/commands/__init__.py": "",
    "trainteam/commands/rewards.py": "",  # a command module: may share its name
    "trainteam/commands/run.py": "",
    "workflows/__init__.py": "",
    "workflows/run.py": "from ..agents import p\n",  # relative: workflows -> agents, allowed
    "agents/__init__.py": "",
    "agents/p.py": "from trainteam import workflows\n",  # agents -> workflows (package)
    "trainers/__init__.py": "",
    "trainers/b.py": "from trainteam.curation import a\n",  # allowed, but closes a cycle with curation/a.py
    "trainers/rewards.py": "",
    "curation/__init__.py": "",
    "curation/a.py": "def f():\n    import trainteam.trainers.b\n",  # curation -> trainers, in a function
    "curation/rewards.py": "",  # shares a name with trainers/rewards.py
    "graph/__init__.py": (
        "import importlib\nTABLE = {'x': 'trainteam.agents.p'}\n"  # graph -> agents, by name
        "def __getattr__(name):\n    return importlib.import_module(TABLE[name])\n"
    ),
    "graph/g.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from trainteam.trainers import b\n"
        "def short():\n" + "    x = 1\n" * 79 + "def long():\n" + "    x = 1\n" * 80
    ),
    "tests/test_x.py": "def long():\n" + "    x = 1\n" * 100,  # tests may hold long functions
}
FAKE_PACKAGES = {
    "trainteam": "trainteam",
    "trainteam.workflows": "workflows",
    "trainteam.agents": "agents",
    "trainteam.trainers": "trainers",
    "trainteam.curation": "curation",
    "trainteam.graph": "graph",
}


def test_checks_catch_a_fake_tree(tmp_path):
    for rel, text in FAKE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    mods = project_modules(tmp_path, FAKE_PACKAGES)
    edges = all_imports(mods)

    assert {(e.source, e.target, e.how) for e in upward_imports(edges)} == {
        ("trainteam.core.errors", "trainteam.graph.g", "in function"),
        ("trainteam.agents.p", "trainteam.workflows", "top"),
        ("trainteam.curation.a", "trainteam.trainers.b", "in function"),
        ("trainteam.graph", "trainteam.agents.p", "by name"),
        ("trainteam.graph.g", "trainteam.trainers.b", "type checking"),
    }
    assert ("trainteam.workflows.run", "trainteam.agents.p") in {(e.source, e.target) for e in edges}
    assert import_cycles(edges, mods) == [["trainteam.curation.a", "trainteam.trainers.b"]]
    assert long_functions(tmp_path, source_files(tmp_path)) == ["graph/g.py:84 long (81 lines)"]
    assert duplicate_names(tmp_path, mods) == {"rewards.py": ["curation/rewards.py", "trainers/rewards.py"]}
    assert crowded_folders(tmp_path, source_files(tmp_path), limit=2) == {
        "curation": 3,
        "trainers": 3,
        "trainteam/commands": 3,
    }
