"""A step's output is read back typed (issue 41, item 2): a ``StepResult``'s ``details`` dict is read only through
its step's output model (``GateOutput.of(result)`` in ``trainteam/contract/step_io.py``), never by key elsewhere.

The move is under way: ``STILL_READ`` counts, per file, the places that still read ``<result>.details`` (an
attribute read of ``details`` on anything but ``self``; the dict a step builds for its own result is a local name,
not an attribute). The test fails when a file reads more than its count (a new read by key) and when it reads
fewer (take the count down): the list only shrinks, to nothing. Read from the source (AST).
"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

from test_layering import ROOT, source_files

ACCESSORS = {"trainteam/contract/step_io.py"}  # where the output models read ``details``: the one place allowed
STILL_READ = {  # file -> its reads of a result's details by key, to move onto output models
    "agents/runtime.py": 4,
    "workflows/report/evidence.py": 1,
    "workflows/steps/judge.py": 21,
    "workflows/steps/register.py": 4,
    "workflows/steps/sealed_test.py": 5,
    "workflows/steps/train.py": 1,
}


def details_reads(root: Path, files: list[Path]) -> Counter[str]:
    found: Counter[str] = Counter()
    for path in files:
        rel = path.relative_to(root).as_posix()
        if rel in ACCESSORS:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and node.attr == "details"
                and isinstance(node.ctx, ast.Load)
                and not (isinstance(node.value, ast.Name) and node.value.id == "self")
            ):
                found[rel] += 1
    return found


def test_step_details_are_read_only_through_output_models():
    found = details_reads(ROOT, source_files(ROOT))
    more = {f: n for f, n in found.items() if n > STILL_READ.get(f, 0)}
    assert not more, f"details read by key (read the step's output model instead): {more}"
    fewer = {f: (found.get(f, 0), n) for f, n in STILL_READ.items() if found.get(f, 0) < n}
    assert not fewer, f"fewer reads than listed (found, listed): take STILL_READ down: {fewer}"


def test_the_count_catches_a_fake_tree(tmp_path):
    src = tmp_path / "workflows" / "x.py"
    src.parent.mkdir()
    src.write_text(
        "def f(out, self_like):\n"
        "    details = {'a': 1}\n"  # a step's own dict: not a read
        "    x = out.details['judged']\n"
        "    y = out.details.get('checked')\n"
        "    return details, x, y\n"
        "class R:\n"
        "    def g(self):\n"
        "        return self.details\n"  # the result's own accessor
    )
    assert details_reads(tmp_path, [src]) == Counter({"workflows/x.py": 2})
