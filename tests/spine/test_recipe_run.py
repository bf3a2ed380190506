"""The training engineer's recipe search in a real run: probes as Probe nodes, the choice as a Decision,
and the stage trained with it (the same probes for the same seed: tests/trainers/test_recipe_search.py)."""

from __future__ import annotations

import json

import yaml
from spine_helpers import TINY_TASK, cli

from trainteam.graph import EdgeKind
from trainteam.workspace import Workspace

SEARCHED = {**TINY_TASK, "name": "searched", "search": True,
            "training": {"pretrain": {"max_steps": 36, "per_device_batch_size": 8, "seq_len": 32}}}


def _run(tmp_path, name: str) -> tuple[Workspace, dict, str]:
    ws_dir = tmp_path / name
    task = tmp_path / f"{name}.yaml"
    task.write_text(yaml.safe_dump(SEARCHED))
    proc = cli(ws_dir, "execute-workflow", "train_model", "--task", str(task), "--yes", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    view = json.loads(proc.stdout)
    assert view["status"] == "completed"
    ws = Workspace.open(ws_dir)
    from trainteam.workflows.store import RunStore

    train = next(a["output"] for a in RunStore(ws.engine).attempts(view["run_id"]) if a["step"] == "train")
    return ws, train, view["run_id"]


def test_a_stage_without_a_learning_rate_is_searched_and_trained_at_the_choice(tmp_path):
    ws, train, run_id = _run(tmp_path, "first")
    report = train["details"]["search"]["pretrain"]
    probes = report["probes"]
    assert len(probes) == 6 and report["probe_steps"] == 18 and report["rungs"] == [2, 18]  # half the given 36
    assert sorted(p["steps"] for p in probes) == [2, 2, 2, 2, 18, 18]  # every probe to 2, the best third to 18
    chosen = report["chosen"]
    assert chosen["max_steps"] == 36 and chosen["per_device_batch_size"] == 8  # what the task gave is kept
    assert chosen["learning_rate"] in report["space"] and report["decided_by"] == "offline"
    # the stage trained at the chosen rate, for the given length (the trainer's own record of its arguments)
    assert train["metrics"]["pretrain.steps"] == 36
    # ... going on from the chosen probe's step-18 checkpoint: 18 steps in the stage's own attempt
    assert report["continued_from"] == 18 and train["metrics"]["pretrain.steps_this_attempt"] == 18
    assert not list(ws.root.glob(f"checkpoints/{run_id}/pretrain-search/probe-*"))  # nothing left behind
    g = ws.graph
    decision = next(n for n in g.nodes(kind="Decision") if n["id"].endswith("/pretrain/recipe"))
    assert decision["chosen"]["learning_rate"] == chosen["learning_rate"]
    probe_nodes = [n for n in g.nodes(kind="Probe")]
    assert len(probe_nodes) == 6
    nx = g.to_networkx()
    out = {(dst, d["kind"]) for _, dst, d in nx.out_edges(decision["id"], data=True)}
    assert {n["id"] for n in probe_nodes} == {dst for dst, kind in out if kind == EdgeKind.DECIDED_BY.value}
    assert all(any(d["kind"] == EdgeKind.PRODUCED_BY.value for _, _, d in nx.out_edges(n["id"], data=True))
               for n in probe_nodes)

    # the run report shows every probe, the choice and why, and a picture of the probes' curves
    cli(tmp_path / "first", "runs", "report", run_id, check=True)
    md = next((tmp_path / "first").rglob("report.md")).read_text()
    assert "## Recipe search" in md and "← chosen" in md and "the best 1 - exact_match + 0.01 heldout_loss" in md
    assert (next((tmp_path / "first").rglob("report.md")).parent / "search.png").stat().st_size > 5000



def test_a_later_stage_shares_only_the_time_the_run_has_left_not_what_the_step_already_spent():
    """The demo without settings gave SFT 1,523 s of the 1,140 the run had left: pretraining ran inside the same
    step, which ``spent_s`` (earlier steps only) does not count. The run's live ceiling does."""
    from trainteam.agents.toolbox import ToolContext
    from trainteam.trainers import budget
    from trainteam.workflows.steps.recipe import _time_shares
    from trainteam.workflows.task import TrainTask

    task = TrainTask.model_validate({**TINY_TASK, "stages": ["pretrain", "sft"], "training": {}, "search": True})
    ctx = ToolContext(ws=None, run_id="r", step="train", visit=1, persona="training_engineer", task=task,
                      spent_s=60.0, allowed_s=1800.0)
    with budget.ceiling(1800.0 - 60.0, 1800.0):
        _, first = _time_shares(ctx, "pretrain", ["sft"])
    with budget.ceiling(1140.0, 1800.0):  # the same step, 600 s of pretraining later
        probes, second = _time_shares(ctx, "sft", [])
    # 15 % kept for evaluating and registering (a second's slack: the ceiling runs while the test does)
    assert abs(first - 1740 * 0.85 / 2) < 1 and abs(second - 1140 * 0.85) < 1
    assert probes <= 0.25 * 1800 / 2  # the search's share of the budget, split over the searched stages
