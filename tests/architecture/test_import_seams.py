"""Where the project imports its own modules, read from the source (AST, nothing imported): at the top of
files, except at the seams to the heavy libraries.

A project module is *heavy* when importing it loads one of ``HEAVY_LIBS``: it imports one at its top (module
level, outside ``if TYPE_CHECKING:``), or imports at its top a heavy project module. Importing
``trainteam.a.b`` runs the ``__init__`` of ``trainteam.a`` too, and ``from pkg import name`` reaches the module
``pkg.name`` where that is a module, else the module ``pkg``'s lazy ``_EXPORTS`` table (PEP 562) names for
``name``.

Every import of a project module inside a function must target a heavy module (that import is then the
seam that keeps the heavy library off the light paths), or be named in ``ALLOWED_INNER`` with its reason, or
sit in a CLI command module (``CLI_COMMANDS``) and target a module that loads more than the standard library
(the same reading, with any library outside ``sys.stdlib_module_names`` counted).
``test_checks_catch_a_fake_tree`` shows the check failing on a small tree built to break it.
"""

from __future__ import annotations

import ast
import functools
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from test_layering import ROOT, _parse, import_statements, package_dirs, project_modules

HEAVY_LIBS = frozenset(
    {"torch", "transformers", "trl", "peft", "datasets", "accelerate", "dbos", "pydantic_ai", "matplotlib", "lm_eval"}
)

# The CLI command modules (trainteam/commands/): `trainteam <command> --help` and a usage error import the
# command's module as well, so a command function imports the rooms that do its work (pydantic, SQLAlchemy,
# numpy, ...: 0.3-0.9 s) when it runs. What loads nothing beyond the standard library (core, the stdlib
# readers, the other command modules) is imported at the top there too.
CLI_COMMANDS = "trainteam.commands."
# (importing module, imported module) -> why the import stays inside a function although its target is light.
ALLOWED_INNER: dict[tuple[str, str], str] = {
    (
        "trainteam.workflows.report.views",
        "trainteam.workflows.engine.store",
    ): "the views serve `runs list/show` and `approvals list/show` on the stdlib readers; SQLAlchemy only for "
    "run_public/runs_public",
}


@dataclass(frozen=True)
class Import:
    source: str
    targets: tuple[str, ...]  # the project modules the statement loads (parent packages left out)
    line: int
    how: str  # "top", "in function", "type checking"
    libs: tuple[str, ...]  # the libraries (outside the project) it imports directly, by top-level name

    def __str__(self) -> str:
        return f"{self.source}:{self.line} -> {', '.join(self.targets)}"


def lazy_exports(path: Path, package: str, mods: dict[str, Path]) -> dict[str, str]:
    """A package ``__init__``'s ``_EXPORTS`` table: exported name -> the module that defines it."""
    for node in _parse(path).body:
        if (
            isinstance(node, ast.Assign)
            and any(getattr(t, "id", None) == "_EXPORTS" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            table = {}
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                if isinstance(key, ast.Constant) and isinstance(value, ast.Constant):
                    module = value.value if value.value in mods else f"{package}.{value.value}"
                    if module in mods:
                        table[key.value] = module
            return table
    return {}


def statements(name: str, path: Path, mods: dict[str, Path], exports: dict[str, dict[str, str]]) -> list[Import]:
    """Every import statement of one module that loads a project module or a heavy library."""
    found = []
    for node, base, how in import_statements(name, path):
        if base is None:
            names = [alias.name for alias in node.names]
            targets = [n for n in names if n in mods]
        else:
            names = [base]
            table = exports.get(base, {})
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in mods else table.get(a.name, base) for a in node.names
            ]
            targets = [t for t in targets if t in mods]
        libs = tuple(sorted({n.split(".")[0] for n in names if n and n.split(".")[0] != "trainteam"}))
        targets = [t for t in dict.fromkeys(targets) if t != name]
        if targets or libs:
            found.append(Import(name, tuple(targets), node.lineno, how, libs))
    return found


def loaded_by(target: str, mods: dict[str, Path]) -> list[str]:
    """The project modules importing ``target`` runs: its parent packages and itself."""
    parts = target.split(".")
    return [m for m in (".".join(parts[:i]) for i in range(1, len(parts) + 1)) if m in mods]


def loading(imports: dict[str, list[Import]], mods: dict[str, Path], libs) -> dict[str, str]:
    """Project module -> why importing it loads a library ``libs(name)`` holds: the library it imports at its
    top, or the project module it imports there that loads one."""
    why: dict[str, str] = {}
    for name, stmts in imports.items():
        for s in stmts:
            hit = [lib for lib in s.libs if libs(lib)]
            if s.how == "top" and hit:
                why.setdefault(name, f"imports {', '.join(hit)} (line {s.line})")
    changed = True
    while changed:
        changed = False
        for name, stmts in imports.items():
            if name in why:
                continue
            for s in (s for s in stmts if s.how == "top"):
                hit = next((m for t in s.targets for m in loaded_by(t, mods) if m in why and m != name), None)
                if hit:
                    why[name] = f"imports {hit} (line {s.line})"
                    changed = True
                    break
    return why


@dataclass(frozen=True)
class Scan:
    mods: dict[str, Path]
    imports: dict[str, list[Import]]
    heavy: dict[str, str]  # module -> why it loads a HEAVY_LIBS library
    beyond_stdlib: dict[str, str]  # module -> why it loads a library outside the standard library


def analyse(root: Path, packages: dict[str, str]) -> Scan:
    mods = project_modules(root, packages)
    exports = {p: lazy_exports(path, p, mods) for p, path in mods.items() if path.name == "__init__.py"}
    imports = {name: statements(name, path, mods, exports) for name, path in sorted(mods.items())}
    return Scan(
        mods,
        imports,
        loading(imports, mods, HEAVY_LIBS.__contains__),
        loading(imports, mods, lambda lib: lib not in sys.stdlib_module_names),
    )


def loads(target: str, found: dict[str, str], mods: dict[str, Path]) -> bool:
    """Whether importing ``target`` (its packages' ``__init__`` first) runs a module of ``found``."""
    return any(m in found for m in loaded_by(target, mods))


def allowed_inside(source: str, target: str, scan: Scan, allowed: dict[tuple[str, str], str]) -> bool:
    """Whether a function of ``source`` may import ``target``: a heavy module, a room's module loading more than
    the standard library into a CLI command module, or an ALLOWED_INNER entry."""
    return (
        loads(target, scan.heavy, scan.mods)
        or (source, target) in allowed
        or (source.startswith(CLI_COMMANDS) and loads(target, scan.beyond_stdlib, scan.mods))
    )


def light_inner_imports(scan: Scan, allowed: dict[tuple[str, str], str]) -> list[str]:
    """'module:line -> target' for each project import inside a function that ``allowed_inside`` refuses."""
    return [
        f"{s.source}:{s.line} -> {t}"
        for stmts in scan.imports.values()
        for s in stmts
        if s.how == "in function"
        for t in s.targets
        if not allowed_inside(s.source, t, scan, allowed)
    ]


@functools.cache
def _project() -> Scan:
    return analyse(ROOT, package_dirs())


def test_light_project_modules_are_imported_at_the_top():
    bad = light_inner_imports(_project(), ALLOWED_INNER)
    if bad:
        pytest.fail(
            f"project modules imported inside a function though importing them loads none of "
            f"{sorted(HEAVY_LIBS)} ({len(bad)}); import them at the top, or name the import in "
            f"ALLOWED_INNER with its reason:\n  " + "\n  ".join(bad),
            pytrace=False,
        )


def test_allowed_inner_imports_still_exist():
    scan = _project()
    inner = {
        (s.source, t) for stmts in scan.imports.values() for s in stmts if s.how == "in function" for t in s.targets
    }
    stale = [f"{s} -> {t}" for s, t in ALLOWED_INNER if (s, t) not in inner or loads(t, scan.heavy, scan.mods)]
    assert not stale, f"ALLOWED_INNER names imports that are gone or now target a heavy module: {stale}"


def test_the_scan_finds_what_importing_finds():
    """Heavy and light as measured by importing each module in a fresh process (re-measured with this change)."""
    scan = _project()
    assert set(scan.heavy) == {
        "trainteam.api",
        "trainteam.agents.chat_export",
        "trainteam.agents.compact",
        "trainteam.agents.hooks",
        "trainteam.agents.policy",
        "trainteam.agents.replay",
        "trainteam.agents.runtime",
        "trainteam.workflows.engine.durable",
        "trainteam.workflows.requests.submission",
        "trainteam.trainers.training.progress",
        "trainteam.trainers.training.spike",
        "trainteam.trainers.training.telemetry",
    }
    for module in (
        "trainteam.core.errors",
        "trainteam.core.dbread",
        "trainteam.workflows.engine.readonly",
        "trainteam.commands.common",
        "trainteam.contract.redaction",
    ):
        assert module in scan.mods and module not in scan.beyond_stdlib, (module, scan.beyond_stdlib.get(module))
    for module in ("trainteam.workspace", "trainteam.graph", "trainteam.curation", "trainteam.workflows.engine.spec"):
        assert module in scan.beyond_stdlib and module not in scan.heavy, module


# -- the check can fail ------------------------------------------------------------------------------

FAKE = {
    "trainteam/__init__.py": "",
    "trainteam/cli.py": (
        "def main():\n    from trainteam.lib import light\n"  # light: must be at the top
        "    from trainteam.lib import heavy\n"  # heavy: a seam
        "    from trainteam.lib import lazy_light, lazy_heavy\n"  # names in _EXPORTS
        "    from trainteam.lib.deep import x\n"  # light: its package is too
        "    import trainteam.allowed\n"
    ),  # in the allow-list
    "trainteam/allowed.py": "",
    "trainteam/commands/__init__.py": "",
    "trainteam/commands/run.py": (
        "def run():\n    from trainteam.lib import uses_yaml\n"  # a room, beyond stdlib
        "    from trainteam.lib.light import f\n"
    ),  # stdlib only: flagged
    "lib/__init__.py": "_EXPORTS = {'lazy_light': 'light', 'lazy_heavy': 'trainteam.lib.viaheavy'}\n",
    "lib/light.py": (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import torch\ndef f():\n    import torch\n"
    ),
    "lib/heavy.py": "try:\n    import torch.nn\nexcept ImportError:\n    pass\n",
    "lib/viaheavy.py": "from trainteam.lib import heavy\n",
    "lib/deep.py": "from . import light\n",
    "lib/uses_yaml.py": "import yaml\n",
}
FAKE_PACKAGES = {"trainteam": "trainteam", "trainteam.lib": "lib"}


def test_checks_catch_a_fake_tree(tmp_path):
    for rel, text in FAKE.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    scan = analyse(tmp_path, FAKE_PACKAGES)
    assert set(scan.heavy) == {"trainteam.lib.heavy", "trainteam.lib.viaheavy"}
    assert set(scan.beyond_stdlib) == {"trainteam.lib.heavy", "trainteam.lib.viaheavy", "trainteam.lib.uses_yaml"}
    allowed = {("trainteam.cli", "trainteam.allowed"): "a reason"}
    assert light_inner_imports(scan, allowed) == [
        "trainteam.cli:2 -> trainteam.lib.light",
        "trainteam.cli:4 -> trainteam.lib.light",
        "trainteam.cli:5 -> trainteam.lib.deep",
        "trainteam.commands.run:3 -> trainteam.lib.light",
    ]
    assert "trainteam.cli:6 -> trainteam.allowed" in light_inner_imports(scan, {})
