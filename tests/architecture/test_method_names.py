"""A training method's knowledge lives in its record (``trainers/methods/``): outside that folder no product line
compares a method's name, keys a table by one, or spells a set of them (issue 41). Read from the source (AST).

What counts: a comparison (``==``, ``!=``, ``in``, ``not in``) with a method's name as a literal, or with a name
bound to a literal collection of them; a dict literal keyed by one; a ``Literal[...]`` of them; a module or class
constant holding a collection of them. Ask the record instead (``get_method(cfg.method).cuts_rows``, ``.searched``,
``train_methods()``, ``from_scratch_method()``).

Words spelled like a method that are not one are named below, each where it stands and why: the curriculum's
stage kinds (``pretrain`` is one, beside ``mid_train``), a GRPO loss type, an export format, words in model
names. The test fails when a listed place no longer has its hit, so the list stays true.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

from test_layering import ROOT, source_files

from trainteam.trainers.training.method_names import NAMES

METHODS_FOLDER = ("trainers", "methods")

NOT_METHODS = {  # "path: where" -> why the word there is not a training method's name
    "trainers/evaluation/battery.py: StageKind": "the battery's stage kinds (pretrain, mid_train, ...)",
    "trainers/evaluation/battery.py: DEFAULT_BATTERIES": "the battery of each stage kind",
    "trainers/evaluation/stage_gate.py: PRETRAIN_KINDS": "the stage kinds scored as pretraining",
    "trainers/evaluation/stage_gate.py: kind": "a stage's kind, among those scored as pretraining",
    "trainteam/contract/train_task.py: DEFAULT_METHOD": "a curriculum stage kind -> the method it trains with",
    "trainteam/contract/train_task.py: s.kind": "a curriculum stage's kind",
    "trainteam/contract/train_task.py: first.kind": "a curriculum stage's kind",
    "trainers/training/config.py: loss_type": "GRPO's loss types (TRL's loss_type='grpo')",
    "trainteam/commands/transcripts.py: FORMATS": "a transcript export format (sft rows or chat)",
    "trainteam/commands/transcripts.py: fmt": "a transcript export format",
    "workflows/improve/built_datasets.py: BUILD_KINDS": "the kinds of dataset built from agent traces",
    "workflows/improve/built_datasets.py: table": "the builder of each built dataset kind",
    "workflows/improve/self_improve.py: ID_WORDS": "words of generated run ids",
    "workflows/requests/model_sources.py: VARIANTS": "words in a model's name (…-sft, …-dpo)",
}


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    where: str  # the compared expression, or the name the literal is bound to
    names: tuple[str, ...]

    @property
    def key(self) -> str:
        return f"{self.path}: {self.where}"


def _named(node: ast.AST | None, names: frozenset[str]) -> tuple[str, ...]:
    if isinstance(node, ast.Constant) and node.value in names:
        return (node.value,)
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return tuple(e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names)
    return ()


def _target(node: ast.AST, parents: dict[ast.AST, ast.AST]) -> str:
    """The name a literal is bound to: the nearest assignment's target, else the enclosing function's name."""
    while node in parents:
        node = parents[node]
        if isinstance(node, ast.Assign) and node.targets:
            return ast.unparse(node.targets[0])
        if isinstance(node, ast.AnnAssign):
            return ast.unparse(node.target)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            return node.name
    return "<module>"


def method_name_hits(root: Path, files: list[Path], names: frozenset[str]) -> list[Hit]:
    hits: list[Hit] = []
    for path in files:
        rel = path.relative_to(root)
        if rel.parts[: len(METHODS_FOLDER)] == METHODS_FOLDER:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        constants = {  # a module's names bound to a literal collection of method names
            t.id
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign)
            and isinstance(n.value, (ast.Tuple, ast.List, ast.Set))
            and _named(n.value, names)
            for t in n.targets
            if isinstance(t, ast.Name)
        }

        def hit(node: ast.AST, where: str, found: tuple[str, ...], path: str = rel.as_posix()) -> None:
            hits.append(Hit(path, getattr(node, "lineno", 0), where, found))

        for node in ast.walk(tree):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                for i, side in enumerate(sides):
                    found = _named(side, names) or (
                        (side.id,) if isinstance(side, ast.Name) and side.id in constants else ()
                    )
                    if found:
                        other = sides[1 - i] if len(sides) == 2 else sides[0]
                        hit(node, ast.unparse(other), found)
                        break
            elif isinstance(node, ast.Dict):
                if keys := tuple(k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in names):
                    hit(node, _target(node, parents), keys)
            elif isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal":
                if found := _named(node.slice, names):
                    hit(node, _target(node, parents), found)
            elif isinstance(node, ast.Assign) and (found := _named(node.value, names)):
                if isinstance(node.value, (ast.Tuple, ast.List, ast.Set)):
                    hit(node, ast.unparse(node.targets[0]), found)
    return hits


def _listing(hits: list[Hit]) -> str:
    return "\n".join(f"  {h.path}:{h.line}: {h.where} vs {', '.join(h.names)}" for h in hits)


def test_no_method_name_compared_outside_the_records():
    hits = method_name_hits(ROOT, source_files(ROOT), frozenset(NAMES))
    allowed = NOT_METHODS.keys()
    bad = [h for h in hits if h.key not in allowed]
    assert not bad, "a method's name outside trainers/methods/: ask its record instead\n" + _listing(bad)
    gone = sorted(allowed - {h.key for h in hits})
    assert not gone, f"listed but no longer found (take them off the list): {gone}"


def test_the_check_catches_a_fake_tree(tmp_path):
    src = tmp_path / "workflows" / "x.py"
    src.parent.mkdir()
    src.write_text(
        'CUT = ("sft", "dpo")\n'
        "def f(cfg, kind):\n"
        '    a = cfg.method == "kto"\n'
        "    b = cfg.method in CUT\n"
        '    c = {"grpo": 1}.get(cfg.method)\n'
        '    return kind == "mid_train"\n'
    )
    ok = tmp_path / "trainers" / "methods" / "y.py"
    ok.parent.mkdir(parents=True)
    ok.write_text('def g(cfg):\n    return cfg.method == "sft"\n')
    hits = method_name_hits(tmp_path, [src, ok], frozenset(NAMES))
    assert {(h.line, h.where, h.names) for h in hits} == {
        (1, "CUT", ("sft", "dpo")),
        (3, "cfg.method", ("kto",)),
        (4, "cfg.method", ("CUT",)),
        (5, "c", ("grpo",)),
    }
