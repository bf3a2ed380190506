"""The training engineer's recipe search in a real run: probes as Probe nodes, the choice as a Decision,
and the stage trained with it (the same probes for the same seed: tests/search/test_recipe_search.py)."""

from __future__ import annotations

import json

import yaml
from spine_helpers import TINY_TASK, cli

from trainteam.graph import EdgeKind
from trainteam.trainers.search.recipe_search import lr_text as _lr
from trainteam.workspace import Workspace

SEARCHED = {
    **TINY_TASK,
    "name": "searched",
    "search": True,
    "training": {"pretrain": {"max_steps": 36, "per_device_batch_size": 8, "seq_len": 32}},
}


def _run(tmp_path, name: str) -> tuple[Workspace, dict, str, str]:
    ws_dir = tmp_path / name
    task = tmp_path / f"{name}.yaml"
    task.write_text(yaml.safe_dump(SEARCHED))
    proc = cli(ws_dir, "execute-workflow", "train_model", "--task", str(task), "--yes", "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    view = json.loads(proc.stdout)
    assert view["status"] == "completed"
    ws = Workspace.open(ws_dir)
    from trainteam.workflows.engine.store import RunStore

    train = next(a["output"] for a in RunStore(ws.engine).attempts(view["run_id"]) if a["step"] == "train")
    return ws, train, view["run_id"], proc.stderr


def test_a_stage_without_a_learning_rate_is_searched_and_trained_at_the_choice(tmp_path):
    ws, train, run_id, printed = _run(tmp_path, "first")
    report = train["details"]["search"]["pretrain"]
    probes = report["probes"]
    assert report["probe_steps"] == 18 and report["rungs"] == [2, 18]  # half the given 36; past the 1-step warm-up
    assert report["warmup_steps"] == 1 and report["objective"] == "heldout_loss"  # the task gates on held-out loss
    assert len(probes) == 6 + len(report["widened"])  # the grid, and the rates beyond its edge where the best sat
    steps = sorted(p["steps"] for p in probes)
    assert steps[-2:] == [18, 18] and set(steps[:-2]) <= {1, 2}  # every probe to 2, the best third to 18
    chosen = report["chosen"]
    assert chosen["max_steps"] == 36 and chosen["per_device_train_batch_size"] == 8  # what the task gave is kept
    assert chosen["learning_rate"] in report["space"] + report["widened"] and report["decided_by"] == "offline"
    # each rung's comparison, as it was made: who went on from step 2, and the choice at 18 with its reason
    first, last = report["comparisons"][0], report["comparisons"][-1]
    assert (first["step"], first["ranked_by"], len(first["going_on"])) == (2, "heldout_loss", 2)
    assert last["step"] == 18 and last["outcome"] == "chosen" and last["going_on"] == [report["best_trial"]]
    assert report["choice_reason"].startswith("the best at step 18")
    # ... printed as they happened (the run's stderr), and in `runs show --json` and `runs show`
    assert "recipe search of pretrain: lr 1e-4, 2.51e-4" in printed
    assert sum(" at step 2: held-out loss " in line for line in printed.splitlines()) >= 6
    assert "step 2: held-out loss ranks them; on to step 18: lr" in printed
    assert (
        f"recipe for pretrain: lr {_lr(chosen['learning_rate'])} (probe {report['best_trial']}): the best at" in printed
    )
    shown = json.loads(cli(tmp_path / "first", "runs", "show", run_id, "--json", check=True).stdout)["search"]
    assert shown["pretrain"]["chosen"] == chosen and shown["pretrain"]["comparisons"] == report["comparisons"]
    assert [p["heldout_loss"] for p in shown["pretrain"]["probes"]] == [p["values"] for p in probes]
    text = cli(tmp_path / "first", "runs", "show", run_id, check=True).stdout
    assert f"recipe search pretrain: lr {chosen['learning_rate']:g} among {len(probes)} probes" in text
    # the stage trained at the chosen rate, for the given length (the trainer's own record of its arguments)
    assert train["metrics"]["pretrain.steps"] == 36
    # ... going on from the chosen probe's step-18 checkpoint: 18 steps in the stage's own attempt
    assert report["continued_from"] == 18 and train["metrics"]["pretrain.steps_this_attempt"] == 18
    assert not list(ws.root.glob(f"checkpoints/{run_id}/pretrain-search/probe-*"))  # nothing left behind
    g = ws.graph
    decision = next(n for n in g.nodes(kind="Decision") if n["id"].endswith("/pretrain/recipe"))
    assert decision["chosen"]["learning_rate"] == chosen["learning_rate"]
    probe_nodes = [n for n in g.nodes(kind="Probe")]
    assert len(probe_nodes) == len(probes)
    nx = g.to_networkx()
    out = {(dst, d["kind"]) for _, dst, d in nx.out_edges(decision["id"], data=True)}
    assert {n["id"] for n in probe_nodes} == {dst for dst, kind in out if kind == EdgeKind.DECIDED_BY.value}
    assert all(
        any(d["kind"] == EdgeKind.PRODUCED_BY.value for _, _, d in nx.out_edges(n["id"], data=True))
        for n in probe_nodes
    )

    # the run report shows every probe, the choice and why, and a picture of the probes' curves
    cli(tmp_path / "first", "runs", "report", run_id, check=True)
    md = next((tmp_path / "first").rglob("report.md")).read_text()
    assert "## Recipe search" in md and "← chosen" in md and "the best at step 18" in md
    assert (next((tmp_path / "first").rglob("report.md")).parent / "search.png").stat().st_size > 5000


def test_a_later_stage_shares_only_the_time_the_run_has_left_not_what_the_step_already_spent():
    """The demo without settings gave SFT 1,523 s of the 1,140 the run had left: pretraining ran inside the same
    step, which ``spent_s`` (earlier steps only) does not count. The run's live ceiling does."""
    from trainteam.contract.step_io import ToolContext
    from trainteam.contract.train_task import TrainTask
    from trainteam.trainers.training import budget
    from trainteam.workflows.steps.recipe import _time_shares

    task = TrainTask.model_validate({**TINY_TASK, "stages": ["pretrain", "sft"], "training": {}, "search": True})
    ctx = ToolContext(
        ws=None,
        run_id="r",
        step="train",
        visit=1,
        persona="training_engineer",
        task=task,
        spent_s=60.0,
        allowed_s=1800.0,
    )
    with budget.ceiling(1800.0 - 60.0, 1800.0):
        _, first = _time_shares(ctx, "pretrain", ["sft"])
    with budget.ceiling(1140.0, 1800.0):  # the same step, 600 s of pretraining later
        probes, second = _time_shares(ctx, "sft", [])
    # 15 % kept for evaluating and registering (a second's slack: the ceiling runs while the test does)
    assert abs(first - 1740 * 0.85 / 2) < 1 and abs(second - 1140 * 0.85) < 1
    assert probes <= 0.25 * 1800 / 2  # the search's share of the budget, split over the searched stages


def test_the_rungs_rank_by_the_gates_metric_the_task_names_else_the_default_gates():
    """The task's gate metric for the stage when the slice can measure it; else the default gate's: exact match
    after pre-training, held-out loss for pre-training (trainers/evaluation/stage_gate.py)."""
    from trainteam.contract.train_task import TrainTask
    from trainteam.workflows.steps.recipe import search_metric

    def metric(stages, gates):
        task = TrainTask.model_validate({**TINY_TASK, "stages": stages, "training": {}, "gates": gates})
        return search_metric(task, stages[-1])

    assert metric(["pretrain", "sft"], {"sft": {"metric": "format_adherence", "min": 0.9}})[0] == "format_adherence"
    assert metric(["pretrain", "sft"], {"sft": {"metric": "heldout_loss", "max": 2.0}})[0] == "heldout_loss"
    assert metric(["pretrain", "sft"], {}) == (
        "exact_match",
        "the task names no gate: a post_train stage's default gate is exact match",
    )
    assert metric(["pretrain"], {})[0] == "heldout_loss"
    named, why = metric(["pretrain", "sft"], {"sft": {"metric": "determinism", "min": 0.9}})
    assert named == "exact_match" and why.startswith("the gate's determinism cannot be measured on the slice")
