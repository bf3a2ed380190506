"""Hostile spec and config files through the real CLI: each is one line on stderr, exit 2, no
traceback, done within 10 s of CPU time, and the workspace is not created (nothing was written)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from cpu_clock import cpu_seconds
from spine_helpers import TINY_TASK, cli

# Nine levels of nine aliases (9**9, 387 million strings once expanded), in a spec whose step
# input names the last one; a comment pads it to the 723 bytes.
_BOMB = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(f"{c}: &{c} [{','.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True)),
        "name: bomb\nstart: s\nsteps: [{name: s, persona: data_curator, tool: prepare_corpus, inputs: {x: *i}}]\n",
    ]
)
BOMB = _BOMB + "# billion laughs".ljust(722 - len(_BOMB), ".") + "\n"
GOOD_STEP = {"name": "prep", "persona": "data_curator", "tool": "prepare_corpus"}
ROOT = Path(__file__).resolve().parents[2]
BUNDLED = ROOT / "workflows" / "train_model.yaml"


def _looping(*loops: int, more: tuple[tuple[str, int], ...] = ()) -> str:
    """The bundled train_model spec with its two loop edges allowed ``loops`` passes, and ``more`` loop edges
    (``(target, max_loops)``) from its final gate."""
    spec = yaml.safe_load(BUNDLED.read_text())
    edges = [e for e in spec["edges"] if e.get("max_loops")]
    assert len(edges) == len(loops)
    for e, n in zip(edges, loops, strict=True):
        e["max_loops"] = n
    spec["edges"] += [{"from": "gate_final", "to": to, "when": "failed", "max_loops": n} for to, n in more]
    return yaml.safe_dump(spec)


def _spec(**step) -> str:
    return yaml.safe_dump({"name": "t", "start": "prep", "steps": [{**GOOD_STEP, **step}]})


def _refused(ws, *args: str, expected: str) -> str:
    with cpu_seconds() as spent:  # CPU, not wall time: a busy machine must not fail it
        proc = cli(ws, *args, timeout=600)
    took = spent.seconds
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert expected in lines[0], lines[0]
    assert took < 10, f"took {took:.1f}s"
    assert not ws.exists()  # nothing was written for a refused input
    return lines[0]


@pytest.fixture
def task(tmp_path):
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump({**TINY_TASK, "workflow": "t"}))
    return path


def test_the_bomb_is_small():
    assert len(BOMB.encode()) == 723


@pytest.mark.parametrize("command", ["validate", "execute"])
def test_an_alias_bomb_is_refused_at_once(command, tmp_path, ws, task):
    spec = tmp_path / "bomb.yaml"
    spec.write_text(BOMB)
    args = (
        ("workflows", "validate", str(spec))
        if command == "validate"
        else ("execute-workflow", str(spec), "--task", str(task))
    )
    line = _refused(ws, *args, expected="aliases expand it to more than 100,000 nodes")
    assert str(spec) in line


def _write(path, body: str | bytes):
    path.write_bytes(body if isinstance(body, bytes) else body.encode())
    return path


FILES = {
    "100k-deep nesting": ("[" * 100_000 + "]" * 100_000, "nested deeper than 64 levels"),
    "200-deep block mapping": ("a:\n" + "".join(" " * i + "a:\n" for i in range(1, 200)), "nested deeper than 64"),
    "2 MB spec": ("name: t\n# " + "x" * 2_000_000 + "\n", "workflow spec is larger than 1,048,576 bytes"),
    "not UTF-8": (b"name: caf\xe9\n", "workflow spec is not UTF-8 text (byte 0xe9 at offset 9)"),
    "UTF-16": (_spec().encode("utf-16"), "workflow spec is UTF-16; save it as UTF-8"),
    "UTF-16 without a BOM": (_spec().encode("utf-16-le"), "workflow spec is UTF-16; save it as UTF-8"),
    "NUL bytes": (b"name: t\x00\n", "NUL bytes"),
    "recursive alias": ("&a [*a]\n", "recursive alias"),
    "two documents": ("name: a\n---\nname: b\n", "not valid YAML (but found another document, line 2)"),
    "unknown tool": (_spec(tool="fly"), "steps.prep.tool: unknown tool 'fly'"),
    "tool not on the card": (_spec(tool="train"), "steps.prep.tool: 'train' is not on the data_curator card"),
    "a loop allowed 10^9 times": (_looping(10**9, 1), "edges.8.max_loops: Input should be less than or equal to 10"),
    "loops over 30 passes in all": (
        _looping(10, 10, more=(("train", 10), ("final_eval", 1))),
        "edges: the loop edges allow 31 passes in all; at most 30",
    ),
    "101 steps": (
        yaml.safe_dump({"name": "t", "start": "s0", "steps": [{**GOOD_STEP, "name": f"s{i}"} for i in range(101)]}),
        "steps: List should have at most 100 items",
    ),
    "a key given twice": (_spec() + "start: other\n", "key 'start' is given twice (lines 2 and 7); keep one"),
    "a step's key given twice": (
        "name: t\nstart: prep\nsteps:\n- name: prep\n  persona: data_curator\n"
        "  tool: prepare_corpus\n  persona: eval_judge\n",
        "key 'persona' is given twice (lines 5 and 7)",
    ),
}


@pytest.mark.parametrize("case", sorted(FILES))
def test_a_bad_spec_file_is_one_line(case, tmp_path, ws):
    body, expected = FILES[case]
    spec = _write(tmp_path / "spec.yaml", body)
    line = _refused(ws, "workflows", "validate", str(spec), expected=expected)
    assert str(spec) in line


def test_a_tool_the_run_would_refuse_fails_before_the_run(tmp_path, ws, task):
    spec = _write(tmp_path / "t.yaml", _spec(persona="eval_judge", tool="register_model"))
    _refused(
        ws,
        "execute-workflow",
        str(spec),
        "--task",
        str(task),
        expected="steps.prep.tool: 'register_model' is not on the eval_judge card",
    )


def test_the_bundled_and_a_good_spec_still_validate(tmp_path, ws):
    spec = _write(tmp_path / "ok.yaml", "# a comment\n" + _spec())
    proc = cli(ws, "workflows", "validate", str(spec))
    assert proc.returncode == 0 and "ok (t, 1 steps)" in proc.stdout, proc.stderr
    at_the_bounds = _write(tmp_path / "bounds.yaml", _looping(10, 10, more=(("train", 10),)))
    assert cli(ws, "workflows", "validate", str(at_the_bounds)).returncode == 0
    bom = _write(tmp_path / "bom.yaml", b"\xef\xbb\xbf" + _spec().encode())
    assert cli(ws, "workflows", "validate", str(bom)).returncode == 0
    assert cli(ws, "workflows", "show", "train_model").returncode == 0
    assert not ws.exists()


@pytest.mark.parametrize("kind", ["symlink loop", "/dev/zero", "FIFO", "folder", "missing"])
def test_a_spec_that_is_not_a_file(kind, tmp_path, ws, task):
    path = tmp_path / "spec.yaml"
    if kind == "symlink loop":
        os.symlink(tmp_path / "other.yaml", path)
        os.symlink(path, tmp_path / "other.yaml")
        expected = "workflow spec is a symlink loop"
    elif kind == "/dev/zero":
        path, expected = "/dev/zero", "workflow spec is not a regular file"
    elif kind == "FIFO":
        os.mkfifo(path)  # opening it would block until a writer came
        expected = "workflow spec is not a regular file"
    elif kind == "folder":
        path.mkdir()
        expected = "workflow spec is a folder"
    else:
        expected = "workflow spec not found"
    _refused(ws, "workflows", "validate", str(path), expected=expected)
    _refused(ws, "execute-workflow", str(path), "--task", str(task), expected=expected)


def test_a_config_file_is_bounded_too(tmp_path, ws):
    bomb = _write(tmp_path / "cfg.yaml", BOMB)
    _refused(ws, "plan", "--params", "1e6", "--config", str(bomb), expected="--config: ")
    _refused(
        ws,
        "plan",
        "--params",
        "1e6",
        "--hardware",
        "/dev/zero",
        expected="/dev/zero: --hardware file is not a regular file",
    )


SAFE_LOAD_PARITY = [
    "a: &x [1, 2.5, null, true, '3']\nb: *x\nc: {<<: {d: 1}, e: 2014-01-02}\n",
    "- {name: s, persona: data_curator}\n- !!str 12\n- 1_000\n- 0x1f\n- .inf\n",
    "",
    "# only a comment\n",
]


@pytest.mark.parametrize("loader", ["libyaml", "python"])
def test_load_yaml_is_safe_load_within_the_limits(loader, monkeypatch):
    from trainteam.core import inputfiles
    from trainteam.core.errors import BadInput

    if loader == "python":  # the fallback where libyaml is missing
        monkeypatch.setattr(inputfiles, "_Loader", inputfiles._PyLoader)
    for text in SAFE_LOAD_PARITY:
        assert inputfiles.load_yaml(text, "x.yaml") == yaml.safe_load(text)
    with cpu_seconds() as spent:
        for text in (BOMB, "[" * 100_000, "&a [*a]", "!!python/object:os.system {}"):
            with pytest.raises(BadInput, match=r"^x\.yaml: "):
                inputfiles.load_yaml(text, "x.yaml")
    assert spent.seconds < 1


@pytest.mark.parametrize("loader", ["libyaml", "python"])
def test_a_key_given_twice_is_refused_naming_both_lines(loader, monkeypatch):
    """PyYAML keeps the last of two equal keys silently; a person's second ``learning_rate:`` must not win unseen."""
    from trainteam.core import inputfiles
    from trainteam.core.errors import BadInput

    if loader == "python":
        monkeypatch.setattr(inputfiles, "_Loader", inputfiles._PyLoader)
    text = "training:\n  sft:\n    learning_rate: 1e-4\n    max_steps: 5\n    learning_rate: 3e-4\n"
    with pytest.raises(
        BadInput,
        match=r"^task\.yaml: YAML refused: key 'learning_rate' is given twice "
        r"\(lines 3 and 5\); keep one$",
    ):
        inputfiles.load_yaml(text, "task.yaml")
    with pytest.raises(BadInput, match=r"key 'a' is given twice \(lines 1 and 1\)"):
        inputfiles.load_yaml("- {a: 1, b: 2, a: 3}\n", "x.yaml")
    # what YAML itself allows stays: a written key over a merged one, equal text of different types, equal keys
    # in different mappings
    for ok in ("base: &b {a: 1}\nc:\n  <<: *b\n  a: 2\n", "1: a\n'1': b\n", "x: {a: 1}\ny: {a: 1}\n"):
        assert inputfiles.load_yaml(ok, "x.yaml") == yaml.safe_load(ok)


def test_a_task_file_with_a_key_given_twice_is_one_line(tmp_path, ws):
    body = yaml.safe_dump(TINY_TASK) + "name: other\n"
    task = _write(tmp_path / "task.yaml", body)
    line = _refused(ws, "validate", str(task), expected="key 'name' is given twice")
    assert str(task) in line
