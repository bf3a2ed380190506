"""Inside a room, folders import one way (issue 41): the subfolders of ``workflows/`` and of ``trainers/`` stand
in the order ARCHITECTURE.md states, and a module imports its own folder and the folders after it, never one
before. Read from the source (the imports ``test_layering`` collects, lazy ones and ``TYPE_CHECKING`` ones
included); a room's own ``__init__`` (its lazy front door) is not a folder and is not held to the order.
"""

from __future__ import annotations

from pathlib import Path

from test_layering import ROOT, Edge, _project

ORDERS = {  # room -> its subfolders, top to bottom (ARCHITECTURE.md, "One-way dependencies")
    "workflows": ("improve", "requests", "runs", "steps", "report", "task", "engine"),
    "trainers": ("launch", "search", "export", "serving", "evaluation", "fit", "planning", "methods", "training"),
}


def _folder(module: str, room: str) -> str | None:
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and parts[1] == room else None


def backward_imports(edges: list[Edge], orders: dict[str, tuple[str, ...]]) -> list[Edge]:
    """Imports from a folder to one before it in its room's order."""
    bad = []
    for e in edges:
        for room, order in orders.items():
            source, target = _folder(e.source, room), _folder(e.target, room)
            if source in order and target in order and order.index(target) < order.index(source):
                bad.append(e)
    return bad


def unplaced_folders(root: Path, orders: dict[str, tuple[str, ...]]) -> list[str]:
    """Subfolders holding Python modules that their room's order does not name."""
    return sorted(
        f"{room}/{d.name}"
        for room, order in orders.items()
        for d in (root / room).iterdir()
        if d.is_dir() and any(d.glob("*.py")) and d.name not in order
    )


def test_folders_inside_a_room_import_one_way():
    mods, edges = _project()
    bad = backward_imports(edges, ORDERS)
    assert not bad, "imports back up inside a room:\n" + "\n".join(
        f"  {e.source} -> {e.target} (line {e.line})" for e in bad
    )
    assert not unplaced_folders(ROOT, ORDERS), "place the new folder in ORDERS and ARCHITECTURE.md"


def test_architecture_md_states_the_same_order():
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    for room, order in ORDERS.items():
        line = f"- `{room}/`: " + " → ".join(order)
        assert line in text, f"ARCHITECTURE.md should say: {line}"


def test_the_check_catches_a_fake_tree(tmp_path):
    edges = [
        Edge("trainteam.workflows.engine.durable", "trainteam.workflows.steps.catalog", 3, "import"),
        Edge("trainteam.workflows.steps.train", "trainteam.workflows.engine.spec", 4, "import"),
        Edge("trainteam.trainers.training.loop", "trainteam.trainers.planning.pace", 5, "import"),
        Edge("trainteam.trainers", "trainteam.trainers.fit.loop", 6, "by name"),
    ]
    assert [e.line for e in backward_imports(edges, ORDERS)] == [3, 5]
    (tmp_path / "workflows" / "newroom").mkdir(parents=True)
    (tmp_path / "workflows" / "newroom" / "x.py").write_text("")
    (tmp_path / "trainers").mkdir()
    assert unplaced_folders(tmp_path, ORDERS) == ["workflows/newroom"]
