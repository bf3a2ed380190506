"""Bad task and spec files: one line naming the field or file, exit 2, the workspace untouched."""

from __future__ import annotations

import hashlib

import pytest
import yaml
from spine_helpers import DATA, TINY_TASK, cli


def _snapshot(ws):
    if not ws.exists():
        return None
    return {str(p.relative_to(ws)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(ws.rglob("*")) if p.is_file() and not p.name.endswith(("-wal", "-shm"))}


@pytest.fixture(scope="module")
def used_ws(tmp_path_factory):
    """A workspace that already holds something (a completed one-step run)."""
    tmp_path = tmp_path_factory.mktemp("used")
    ws = tmp_path / "ws"
    task = tmp_path / "prep.yaml"
    task.write_text(yaml.safe_dump({**TINY_TASK, "workflow": "prep_only"}))
    cli(ws, "execute-workflow", str(DATA / "prep_only.yaml"), "--task", str(task), "-q", check=True)
    return ws


CASES = {
    "missing field": ({k: v for k, v in TINY_TASK.items() if k != "budget"}, "budget: required field is missing"),
    "wrong type": ({**TINY_TASK, "budget": {"max_wall_minutes": "soon"}}, "budget.max_wall_minutes:"),
    "unknown field": ({**TINY_TASK, "epochs": 3}, "epochs: unknown field"),
    "unknown step": ({**TINY_TASK, "require_approval": ["trian"]}, "require_approval[0]: unknown step 'trian'"),
    "missing path": ({**TINY_TASK, "data": {"path": "nowhere.jsonl", "eval_path": "nowhere.jsonl"}},
                     "data.path: nowhere.jsonl does not exist"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_task_file(case, tmp_path, used_ws):
    body, expected = CASES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(body))
    before = _snapshot(used_ws)
    proc = cli(used_ws, "execute-workflow", "train_model", "--task", str(path))
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert str(path) in lines[0] and expected in lines[0], lines[0]
    assert _snapshot(used_ws) == before


def test_cycle_without_gate_and_not_yaml(tmp_path, ws):
    spec = {"name": "loopy", "start": "a", "steps": [
        {"name": "a", "persona": "data_curator", "tool": "prepare_corpus"},
        {"name": "b", "persona": "data_curator", "tool": "prepare_corpus"}],
        "edges": [{"from": "a", "to": "b"}, {"from": "b", "to": "a"}]}
    path = tmp_path / "loopy.yaml"
    path.write_text(yaml.safe_dump(spec))
    task = tmp_path / "t.yaml"
    task.write_text(yaml.safe_dump({**TINY_TASK, "workflow": "loopy"}))
    proc = cli(ws, "execute-workflow", str(path), "--task", str(task))
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: {path}: edges: cycle a -> b -> a does not pass through a gate edge with max_loops"]
    assert not ws.exists()  # nothing was created for a bad request

    task.write_text("name: [unclosed")
    proc = cli(ws, "execute-workflow", "train_model", "--task", str(task))
    assert proc.returncode == 2 and "not valid YAML" in proc.stderr and not ws.exists()


def test_unknown_run_and_workflow(ws, tmp_path):
    assert cli(ws, "runs", "show", "nope").returncode == 2
    task = tmp_path / "t.yaml"
    task.write_text(yaml.safe_dump(TINY_TASK))
    proc = cli(ws, "execute-workflow", "train_modle", "--task", str(task))
    assert proc.returncode == 2 and "unknown workflow 'train_modle'" in proc.stderr
