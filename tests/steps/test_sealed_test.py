"""The sealed test part: read by no deciding step, scored once at the end (issue 37, part 6).

Two real runs through the CLI on the same data, the second with every sealed test row changed: every
decision (each step's outcome, each gate's verdict and reasons, the dev figures the gates read) is the
same, while the sealed test figures differ — the test rows reach the sealed_test step and nothing before it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from spine_helpers import TINY_TASK, cli, write_task

from trainteam.curation.splits import seal_test

N_EVAL = 45  # 30 dev rows, 15 sealed
SFT = ("pretrain", "sft")


def _rows(n: int, start: int, wrong: bool = False) -> list[dict]:
    out = []
    for i in range(start, start + n):
        a, b = i % 17, (i * 7) % 13
        answer = f"{a + b + (50 if wrong else 0):03d}"
        out.append({"prompt": f"{a:02d}+{b:02d}=", "completion": answer})
    return out


def _task(folder: Path, held: list[dict]) -> Path:
    folder.mkdir()
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _rows(300, 1000)))
    (folder / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in held))
    return write_task(
        folder,
        data={"path": str(folder / "train.jsonl"), "eval_path": str(folder / "eval.jsonl")},
        stages=["pretrain", "sft"],
        training={s: {"max_steps": 6, "per_device_batch_size": 8, "learning_rate": 1e-3, "seq_len": 32} for s in SFT},
        gates={s: {"metric": "heldout_loss", "max": 50.0} for s in SFT},
        answer={"kind": "regex", "pattern": "\\d+", "full_match": True},
        curation={"near_dedup": None},
        model=TINY_TASK["model"],
    )


def _decisions(ws: Path, view: dict) -> dict:
    """What the run decided: each step's outcome, each gate's verdict and reasons (its Gate node), and the dev
    figures those gates read."""
    gates = json.loads(cli(ws, "graph", "nodes", "--kind", "Gate", "--json", check=True).stdout)
    dev = {k: v for k, v in view["metrics"].items() if k.startswith(("evaluate.", "final_eval."))}
    return {
        "steps": {s["name"]: s["status"] for s in view["steps"]},
        "dev": dev,
        "gates": sorted((g["stage"], g["passed"], tuple(g["reasons"])) for g in gates),
    }


def test_changing_the_sealed_rows_changes_no_decision(tmp_path):
    held = _rows(N_EVAL, 0)
    cut = seal_test(N_EVAL, 0)
    assert len(cut.dev) == 30 and len(cut.test) == 15
    changed = [(_rows(1, i, wrong=True)[0] if i in cut.test else r) for i, r in enumerate(held)]
    runs = []
    for name, rows in (("a", held), ("b", changed)):
        task = _task(tmp_path / name, rows)
        ws = tmp_path / f"ws-{name}"
        proc = cli(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "r", "--json", "--yes")
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append((ws, json.loads(proc.stdout)))
    (ws_a, a), (ws_b, b) = runs
    assert a["status"] == b["status"] == "completed"
    decided = _decisions(ws_a, a)
    assert decided == _decisions(ws_b, b)  # the gates, their reasons and the dev figures: the same
    assert decided["steps"]["sealed_test"] == "completed" and len(decided["gates"]) == 3
    test_a = {k: v for k, v in a["metrics"].items() if k.startswith("sealed_test.")}
    test_b = {k: v for k, v in b["metrics"].items() if k.startswith("sealed_test.")}
    assert test_a and test_a != test_b  # the sealed rows were read, by the sealed_test step alone
    assert test_a["sealed_test.heldout_loss"] < test_b["sealed_test.heldout_loss"]  # wrong references cost loss
    sealed = a["sealed_test"]  # runs show --json: the figures to trust, beside the dev ones, with the gap
    assert sealed["rows"] == 15 and "30 dev" in sealed["sizing"] and "15 sealed test" in sealed["sizing"]
    loss = sealed["test"]["heldout_loss"]
    assert sealed["gap"]["heldout_loss"] == pytest.approx(loss - sealed["dev"]["heldout_loss"], abs=1e-4)
    assert sealed["pairwise"].startswith("pairwise judge: off (no provider configured for eval_judge")
    shown = cli(ws_a, "runs", "show", "r", check=True).stdout
    assert "sealed test (15 rows, scored once; the figures to trust): " in shown and "(dev " in shown
    page = _run_page(ws_a, "r")
    assert "<h2>Sealed test: the figures to trust</h2>" in page and "<th>test − dev</th>" in page


def _run_page(ws: Path, run_id: str) -> str:
    """The web console's run page, signed in with a token the real CLI made."""
    from fastapi.testclient import TestClient

    from trainteam.web.app import create_app
    from trainteam.workspace import Workspace

    token = cli(ws, "web", "--new-token", check=True).stdout.strip()
    client = TestClient(create_app(Workspace.open(ws)), base_url="http://127.0.0.1")
    form = client.get("/signin").text
    csrf = re.search(r'name="csrf" value="([^"]+)"', form).group(1)
    client.post("/signin", data={"token": token, "name": "ana", "csrf": csrf, "next": "/runs"}, follow_redirects=False)
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200
    return page.text
