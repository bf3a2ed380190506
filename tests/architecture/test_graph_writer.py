"""One writer for the knowledge graph, one home for file hashing: an AST scan of the project's modules.

- The graph's writing methods (those of ``KnowledgeGraph`` that insert) are called only inside
  ``graph/``: everything else records facts through ``graph/record.py``.
- ``curation/`` and ``trainers/`` never import ``trainteam.graph``; ``graph/`` imports only
  ``trainteam.core`` and itself.
- A file's bytes (or a folder's files) are hashed only in ``trainteam/core/hashing.py``: elsewhere,
  no function both makes a ``hashlib`` hasher and reads files or lists a folder, and nobody calls
  ``hashlib.file_digest``. Hashes of short strings (ids, dedup keys) stay one-liners where they are.

Each rule is checked on sources that break it too, so a scan that silently found nothing fails.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("trainteam", "agents", "workflows", "curation", "trainers", "graph")
HASHING = Path("trainteam/core/hashing.py")
_READS = {"read_bytes", "read_text", "rglob", "glob", "iterdir"}
_OS_READS = {"walk", "scandir", "listdir"}


def _modules() -> list[tuple[Path, ast.Module]]:
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            rel = path.relative_to(ROOT)
            out.append((rel, ast.parse(path.read_text(), filename=str(rel))))
    assert len(out) > 50, "the scan found too few modules: the layout changed"
    return out


def writing_methods() -> set[str]:
    """The methods of KnowledgeGraph that write: those that insert into a table, or call (``self.x``) one that does."""
    tree = ast.parse((ROOT / "graph" / "knowledge.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KnowledgeGraph")
    methods = {f.name: f for f in cls.body if isinstance(f, ast.FunctionDef)}
    attrs = {
        name: [c.func for c in ast.walk(f) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)]
        for name, f in methods.items()
    }
    writers = {name for name, funcs in attrs.items() if any(f.attr == "insert" for f in funcs)}
    while True:
        more = {
            name
            for name, funcs in attrs.items()
            if any(f.attr in writers and isinstance(f.value, ast.Name) and f.value.id == "self" for f in funcs)
        }
        if more <= writers:
            return writers
        writers |= more


def _networkx_names(func: ast.AST) -> set[str]:
    """Local names bound to a networkx graph (``g = nx.DiGraph()``): their add_node is not the knowledge graph's."""
    names = set()
    for node in ast.walk(func):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Attribute)
            and isinstance(node.value.func.value, ast.Name)
            and node.value.func.value.id in ("nx", "networkx")
        ):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _scopes(tree: ast.AST):
    """Each function (and the module itself) with the nodes that belong to it, nested functions apart."""

    def own(scope):
        for child in ast.iter_child_nodes(scope):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            yield child
            yield from own(child)

    yield tree, list(own(tree))
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node, list(own(node))


def graph_writes(tree: ast.AST, writers: set[str]) -> list[int]:
    """Lines that call a graph writing method on anything but a local networkx graph or ``os``."""
    lines = []
    for scope, nodes in _scopes(tree):
        local_nx = _networkx_names(scope)
        for node in nodes:
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in writers:
                recv = node.func.value
                if isinstance(recv, ast.Name) and (recv.id in local_nx or recv.id == "os"):
                    continue
                lines.append(node.lineno)
    return lines


def _is_hashlib(call: ast.Call, attr: str | None = None) -> bool:
    f = call.func
    return (
        isinstance(f, ast.Attribute)
        and isinstance(f.value, ast.Name)
        and f.value.id == "hashlib"
        and (attr is None or f.attr == attr)
    )


def _reads(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Name) and f.id == "open" or isinstance(f, ast.Attribute) and f.attr == "open":
        mode = next((k.value for k in call.keywords if k.arg == "mode"), None)
        positional = 1 if isinstance(f, ast.Name) else 0  # open(path, mode) / path.open(mode)
        if mode is None and len(call.args) > positional:
            mode = call.args[positional]
        text = mode.value if isinstance(mode, ast.Constant) and isinstance(mode.value, str) else "r"
        return not set(text) & set("wax")
    if isinstance(f, ast.Attribute) and f.attr in _READS:
        return True
    return isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "os" and f.attr in _OS_READS


def file_hashing(tree: ast.AST) -> list[int]:
    """Lines of hashlib hashers made in a function that also reads files, and of hashlib.file_digest."""
    lines = []
    for _, nodes in _scopes(tree):
        calls = [n for n in nodes if isinstance(n, ast.Call)]
        lines += [c.lineno for c in calls if _is_hashlib(c, "file_digest")]
        if any(_reads(c) for c in calls):
            lines += [c.lineno for c in calls if _is_hashlib(c) and c.func.attr != "file_digest"]
    return sorted(set(lines))


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


# -- the rules on the project ---------------------------------------------------------------------


def test_the_graph_is_written_only_inside_graph():
    writers = writing_methods()
    assert {"add_node", "add_edge", "link"} <= writers
    found = [
        f"{rel}:{line}" for rel, tree in _modules() if rel.parts[0] != "graph" for line in graph_writes(tree, writers)
    ]
    assert not found, f"graph writes outside graph/ (use trainteam.graph.record): {found}"


def test_only_record_and_knowledge_write_inside_graph():
    writers = writing_methods()
    found = [
        f"{rel}:{line}"
        for rel, tree in _modules()
        if rel.parts[0] == "graph" and rel.name not in ("record.py", "knowledge.py")
        for line in graph_writes(tree, writers)
    ]
    assert not found


def test_curation_and_trainers_do_not_import_the_graph_and_graph_imports_only_core():
    found = []
    for rel, tree in _modules():
        for line, name in _imports(tree):
            if rel.parts[0] in ("curation", "trainers") and name.startswith("trainteam.graph"):
                found.append(f"{rel}:{line} imports {name}")
            if (
                rel.parts[0] == "graph"
                and name.startswith("trainteam.")
                and not name.startswith(("trainteam.core", "trainteam.graph"))
            ):
                found.append(f"{rel}:{line} imports {name}")
    assert not found, found


def test_file_contents_are_hashed_only_in_core_hashing():
    found = [f"{rel}:{line}" for rel, tree in _modules() if rel != HASHING for line in file_hashing(tree)]
    assert not found, f"file hashing outside {HASHING} (use trainteam.core.hashing): {found}"
    assert file_hashing(ast.parse((ROOT / HASHING).read_text())), "the scan no longer sees the hashing module's own"


def test_no_module_but_core_hashing_defines_the_hash_functions():
    names = {"sha256_file", "artifact_hashes", "file_fingerprint", "weights_hash"}
    found = [
        f"{rel}:{node.lineno} {node.name}"
        for rel, tree in _modules()
        if rel != HASHING
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name in names
    ]
    assert not found, found


# -- the rules fail where they should -------------------------------------------------------------


def test_the_scans_catch_what_they_forbid():
    writers = writing_methods()
    bad_graph = ast.parse(
        "def f(ctx, ws):\n"
        "    ctx.graph.link(NodeKind.GATE, 'k', [])\n"
        "    g = ws.graph\n"
        "    g.add_node(NodeKind.RUN, 'r')\n"
        "    g.add_edge('a', 'b', 'uses')\n"
    )
    assert graph_writes(bad_graph, writers) == [2, 4, 5]
    fine = ast.parse(
        "import networkx as nx, os\ndef f(s):\n    g = nx.DiGraph()\n    g.add_node('x')\n    os.link('a', 'b')\n"
    )
    assert graph_writes(fine, writers) == []
    old_ways = ast.parse(
        "def a(path):\n"  # trainteam/contract/step_io.py's sha256_file before
        "    h = hashlib.sha256()\n"
        "    with open(path, 'rb') as f:\n"
        "        h.update(f.read())\n"
        "def b(path):\n"  # trainers/training/manifest.py's
        "    with open(path, 'rb') as fh:\n"
        "        return hashlib.file_digest(fh, 'sha256').hexdigest()\n"
        "def c(final_dir):\n"  # the train step's checkpoint key
        "    weights = sorted(final_dir.glob('*.safetensors'))\n"
        "    return hashlib.sha256(''.join(sha256_file(w) for w in weights).encode()).hexdigest()\n"
        "def d(path):\n"  # agents/runtime.py's JSON artifacts
        "    return hashlib.sha256(path.read_text().encode()).hexdigest()\n"
    )
    assert file_hashing(old_ways) == [2, 7, 10, 12]
    strings = ast.parse(
        "def e(params, spill):\n    spill.open('wb')\n"
        "    return hashlib.sha256(json.dumps(params).encode()).hexdigest()\n"
    )
    assert file_hashing(strings) == []
    imports = ast.parse("from trainteam.graph import KnowledgeGraph\nimport trainteam.graph.record\n")
    assert [n for _, n in _imports(imports)] == ["trainteam.graph", "trainteam.graph.record"]
