"""The ladder pre-check of a user's own data, through the real CLI in real processes: a small proxy
trained on the data and on a signal-free control says whether the data teaches anything; data that
does not waits for a person (approved, the run goes on without training the proxies again;
rejected, it stops with the verdict); a small run, a model folder or the demo skip it, saying why."""

from __future__ import annotations

import random

import pytest
import yaml
from spine_helpers import cli, pending_approvals, run_view, spawn, wait_for, write_task

from trainteam.contract.step_io import ToolContext
from trainteam.contract.train_task import TrainTask
from trainteam.curation.jsonl import write_jsonl
from trainteam.workflows.steps.precheck import precheck_data, reason_to_run
from trainteam.workspace import Workspace

SPEC = {
    "name": "precheck_only",
    "start": "prepare_corpus",
    "steps": [
        {"name": "prepare_corpus", "persona": "data_curator", "tool": "prepare_corpus"},
        {"name": "curate", "persona": "data_curator", "tool": "curate"},
        {"name": "precheck_data", "persona": "data_curator", "tool": "precheck_data"},
    ],
    "edges": [{"from": "prepare_corpus", "to": "curate"}, {"from": "curate", "to": "precheck_data"}],
}


def _larger(tmp_path, random_answers: bool = False) -> dict:
    """600 distinct "which is larger" rows to train on (answered right, or with random numbers), 20 others
    held out."""
    rng = random.Random(0)
    pairs = [(a, b) for a in range(30) for b in range(30)]
    rng.shuffle(pairs)
    rows = [
        {
            "id": f"m{i}",
            "prompt": f"max {a} {b} =",
            "completion": str(rng.randrange(30) if random_answers else max(a, b)),
        }
        for i, (a, b) in enumerate(pairs[:600])
    ]
    held = [
        {"id": f"e{i}", "prompt": f"max {a} {b} =", "completion": str(max(a, b))}
        for i, (a, b) in enumerate(pairs[600:620])
    ]
    return {
        "path": str(write_jsonl(rows, tmp_path / "larger.jsonl")),
        "eval_path": str(write_jsonl(held, tmp_path / "larger_eval.jsonl")),
    }


def _task(tmp_path, data: dict, precheck: dict | None = None, workflow: str = "precheck_only"):
    spec = tmp_path / "precheck_only.yaml"
    spec.write_text(yaml.safe_dump(SPEC))
    extra = {"precheck": precheck} if precheck is not None else {}
    task = write_task(
        tmp_path,
        workflow=workflow,
        data=data,
        stages=["pretrain"],
        curation={"near_dedup": None},
        training={"pretrain": {"max_steps": 6, "per_device_batch_size": 8, "seq_len": 16}},
        gates={"pretrain": {"metric": "heldout_loss", "max": 50.0}},
        **extra,
    )
    return str(spec), str(task)


def _precheck_outputs(ws, run_id):
    from trainteam.workflows.engine.store import RunStore
    from trainteam.workspace import Workspace

    return [a["output"] for a in RunStore(Workspace.open(ws).engine).attempts(run_id) if a["step"] == "precheck_data"]


def test_learnable_data_passes_the_precheck_when_the_task_says_always(tmp_path, ws):
    spec, task = _task(tmp_path, _larger(tmp_path), {"mode": "always"})
    proc = cli(ws, "execute-workflow", spec, "--task", task, "--run-id", "r-pre-ok", "-q", timeout=600)
    assert proc.returncode == 0, proc.stderr
    [out] = _precheck_outputs(ws, "r-pre-ok")
    verdict = out["details"]["precheck"]
    assert out["outcome"] == "ok" and (verdict["check"], verdict["verdict"], verdict["accept"]) == (
        "learnability",
        "learnable",
        True,
    )
    assert verdict["why_run"] == "precheck.mode: always" and verdict["heldout"] == "60 rows held out of the data"
    assert verdict["proxy"] == {"hidden_size": 32, "num_layers": 1, "num_heads": 2}
    assert verdict["data"]["rows"] == verdict["baseline"]["rows"] == 540 and verdict["data"]["steps"] == 150
    assert verdict["ratio"] < 0.97  # the right answers teach the proxy clearly more than shuffled ones
    assert run_view(ws, "r-pre-ok")["metrics"]["precheck_data.precheck.ratio"] == round(verdict["ratio"], 4)


@pytest.mark.parametrize("approve", [True, False])
def test_random_answers_are_unlearnable_and_wait_for_a_person(tmp_path, ws, background, approve):
    spec, task = _task(tmp_path, _larger(tmp_path, random_answers=True), {"mode": "always"})
    run_id = f"r-pre-{'yes' if approve else 'no'}"
    run = spawn(ws, "execute-workflow", spec, "--task", task, "--run-id", run_id)
    background.append(run)
    pending = wait_for(lambda: pending_approvals(ws), timeout=600, what="the pre-check approval")
    assert [(a["step"], a["action"]) for a in pending] == [("precheck_data", "accept_precheck")]
    evidence = pending[0]["evidence"]
    assert (evidence["verdict"], evidence["accept"]) == ("unlearnable", False) and evidence["ratio"] >= 0.97
    assert evidence["against"] == "a control: the same rows, each answer moved to another row's prompt"
    assert "the answers may not follow from the prompts" in evidence["reasons"][-1]
    if approve:
        cli(ws, "approvals", "approve", pending[0]["id"], "--by", "alice", "--note", "noisy on purpose", check=True)
        assert run.wait(timeout=600) == 0, run.stderr.read()
        first, rerun = _precheck_outputs(ws, run_id)
        assert first["outcome"] == "failed" and rerun["outcome"] == "ok"
        assert rerun["details"]["accepted_by"]["decided_by"] == "alice"
        assert rerun["details"]["precheck"] == first["details"]["precheck"]  # read back, not trained again
        assert rerun["summary"].endswith("accepted by alice")
    else:
        cli(ws, "approvals", "reject", pending[0]["id"], "--by", "bob", "--note", "fix the labels", check=True)
        assert run.wait(timeout=600) == 1
        view = run_view(ws, run_id)
        assert view["status"] == "failed" and "pre-check (learnability): unlearnable" in view["error"]
        assert "training on data the pre-check failed rejected by bob: fix the labels" in view["error"]


def test_auto_skips_a_small_run_saying_why(tmp_path, ws):
    spec, task = _task(tmp_path, _larger(tmp_path))
    proc = cli(ws, "execute-workflow", spec, "--task", task, "--run-id", "r-pre-auto", "-q", timeout=600)
    assert proc.returncode == 0, proc.stderr
    [out] = _precheck_outputs(ws, "r-pre-auto")
    assert out["outcome"] == "skipped" and out["summary"].startswith("pre-check skipped: the planner estimates ")
    assert out["summary"].endswith("min for the run, under precheck.min_minutes 30: a small run is its own check")


def test_when_auto_runs_and_what_cannot_be_checked(tmp_path):
    data = _larger(tmp_path)

    def task(**changes) -> TrainTask:
        base = {
            "name": "t",
            "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2},
            "data": data,
            "stages": ["pretrain"],
            "budget": {"max_wall_minutes": 30},
        }
        return TrainTask.model_validate({**base, **changes})

    ok, why = reason_to_run(task(precheck={"min_minutes": 0}))
    assert ok and why.startswith("the planner estimates ") and why.endswith(" min for the run (precheck.min_minutes 0)")
    assert reason_to_run(task(budget={"max_wall_minutes": 30, "cost_per_hour_usd": 2.5, "max_cost_usd": 5})) == (
        True,
        "the run costs money (budget.cost_per_hour_usd 2.5)",
    )
    assert reason_to_run(task(precheck={"mode": "never", "min_minutes": 0})) == (False, "precheck.mode: never")
    assert reason_to_run(task(data={"demo": "addition"}, precheck={"min_minutes": 0})) == (
        False,
        "the bundled demo data; the pre-check is for your own data (data.path)",
    )
    folder = tmp_path / "model"
    ok, why = reason_to_run(task(model={"path": str(folder)}, stages=["sft"], precheck={"mode": "always"}))
    assert not ok and why == (
        f"model.path: {folder} is a model folder, which cannot be shrunk to a proxy; its gates judge the data instead"
    )


def test_with_a_reference_it_is_the_ladder_comparison_on_the_tasks_held_out_set(tmp_path):
    """Random answers against a reference that has them right, both proxies scored on the task's
    held-out rows: worse, so a person is asked, with the comparison as the evidence."""
    (tmp_path / "ref").mkdir()
    mine, ref = _larger(tmp_path, random_answers=True), _larger(tmp_path / "ref")
    task = TrainTask.model_validate(
        {
            "name": "t",
            "model": {"hidden_size": 64, "num_layers": 2, "num_heads": 2},
            "data": mine,
            "stages": ["pretrain"],
            "training": {"pretrain": {"seq_len": 16}},
            "budget": {"max_wall_minutes": 30},
            "precheck": {"mode": "always", "reference": ref["path"]},
        }
    )
    ws = Workspace.open(tmp_path / "ws")
    ctx = ToolContext(
        ws=ws,
        run_id="r1",
        step="precheck_data",
        visit=1,
        persona="data_curator",
        task=task,
        outputs={"curate": {"outcome": "ok", "artifacts": {"train": mine["path"], "eval": mine["eval_path"]}}},
        progress=False,
    )
    out = precheck_data(ctx)
    assert out.outcome == "failed" and out.needs.action == "accept_precheck"
    evidence = out.needs.evidence
    assert (evidence["check"], evidence["verdict"], evidence["accept"]) == ("ladder", "worse", False)
    assert evidence["against"] == f"precheck.reference {ref['path']}"
    assert evidence["heldout"] == "eval_data" and evidence["heldout_rows"] == 20
    assert evidence["proxy"] == {"hidden_size": 32, "num_layers": 1, "num_heads": 1}  # the target's smallest rung
    assert evidence["ratio"] > 1.05 and "teaches the proxy less" in evidence["reasons"][-1]
    work = ws.dir("datasets") / "prechecks" / "r1" / "v1"
    assert sorted(p.name for p in work.iterdir()) == ["verdict.json"]  # the proxies' weights are not kept
