"""A step's output is read back typed (issue 41, item 2): a ``StepResult``'s ``details`` dict is read only through
its step's output model (``TrainOutput.of(result)``, ``EvalOutput``, ``GateOutput``, ... in
``trainteam/contract/step_outputs.py``, and ``StepResult``'s own accessors in ``step_io.py``), never by key
elsewhere: a new read by key fails this test, naming the file.

Counted: an attribute read of ``details`` on anything but ``self`` (the dict a step builds for its own result is a
local name, not an attribute), and a stored output's ``["details"]`` / ``.get("details")`` (the run store's JSON:
read it with ``<Output>.stored(output)``). Read from the source (AST).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from test_layering import ROOT, source_files

ACCESSORS = {  # where the output models read ``details``: the one place allowed
    "trainteam/contract/step_io.py",
    "trainteam/contract/step_outputs.py",
}


def details_reads(root: Path, files: list[Path]) -> Counter[str]:
    found: Counter[str] = Counter()
    for path in files:
        rel = path.relative_to(root).as_posix()
        if rel in ACCESSORS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if _reads_details(node):
                found[rel] += 1
    return found


def _reads_details(node: ast.AST) -> bool:
    """``out.details`` (not ``self.details``), ``stored["details"]`` or ``stored.get("details")``."""
    if isinstance(node, ast.Attribute) and node.attr == "details" and isinstance(node.ctx, ast.Load):
        return not (isinstance(node.value, ast.Name) and node.value.id == "self")
    if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
        return isinstance(node.slice, ast.Constant) and node.slice.value == "details"
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
        return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == "details"
    return False


def test_step_details_are_read_only_through_output_models():
    found = details_reads(ROOT, source_files(ROOT))
    assert not found, f"details read by key (read the step's output model instead): {dict(found)}"


def test_the_count_catches_a_fake_tree(tmp_path):
    src = tmp_path / "workflows" / "x.py"
    src.parent.mkdir()
    src.write_text(
        "def f(out, self_like):\n"
        "    details = {'a': 1}\n"  # a step's own dict: not a read
        "    x = out.details['judged']\n"
        "    y = out.details.get('checked')\n"
        "    z = stored['details']['stage'] + stored.get('details', {})['stage']\n"
        "    return details, x, y, z\n"
        "class R:\n"
        "    def g(self):\n"
        "        return self.details\n"  # the result's own accessor
    )
    assert details_reads(tmp_path, [src]) == Counter({"workflows/x.py": 4})
