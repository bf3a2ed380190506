"""Gates that cannot pass on nothing, through the real CLI on real tiny training (issue 31).

A user's run was registered after ``gate sft: passed: no gate rules for stage sft in the task`` and
``gate_final: exact_match did not regress (0 -> 0)``: every answer had been cut at 8 new tokens. Here a
stage without rules is judged by a default gate against what it started from, and a checked answer metric
that reads the same for the input and the trained model while the held-out loss fell stops the run, with the
judge's diagnosis ``measurement``, before anything is registered."""

from __future__ import annotations

import json

import pytest
import yaml
from spine_helpers import TINY_TASK, cli, run_view, write_task

TWO_STAGES = {
    "pretrain": {"max_steps": 30, "per_device_batch_size": 8, "seq_len": 32},
    "sft": {"max_steps": 30, "per_device_batch_size": 8, "seq_len": 32, "learning_rate": 3e-3},
}


def _outputs(ws, run_id: str) -> dict[str, dict]:
    from trainteam.workflows.engine.store import RunStore
    from trainteam.workspace import Workspace

    return {a["step"]: a["output"] for a in RunStore(Workspace.open(ws).engine).attempts(run_id) if a["output"]}


@pytest.mark.parametrize(
    "answer,why,diagnosis",
    [
        # an answer rule that never matches: the check cannot score even the references (a blind instrument)
        (
            {"kind": "regex", "pattern": "\\d{5}", "full_match": True},
            "measurement failure: the answer check scores only 0%",
            "measurement",
        ),
        # the check sees right answers; exact match 0 -> 0 while the loss fell is no evidence of anything
        (None, "exact_match reads 0 for pretrain and for the trained model while held-out loss fell", None),
    ],
    ids=["blind-check", "unchanged"],
)
def test_an_answer_metric_that_saw_nothing_stops_the_run_before_registration(tmp_path, ws, answer, why, diagnosis):
    # the user's own rule: exact match must not regress (it passed on "0 -> 0" and the model was registered)
    task = write_task(
        tmp_path,
        stages=["pretrain", "sft"],
        training=TWO_STAGES,
        **({"answer": answer} if answer else {}),
        gates={
            "pretrain": {"metric": "heldout_loss", "max": 50.0},
            "sft": {"metric": "exact_match", "max_regression": 0.0},
        },
    )
    proc = cli(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "blind", "--yes", "-q")
    assert proc.returncode == 1, proc.stderr[-2000:]
    view = run_view(ws, "blind")
    assert view["status"] == "failed" and why in view["error"], view["error"]
    gate = _outputs(ws, "blind")["gate"]
    assert gate["outcome"] == "failed" and "exact_match did not regress" in gate["details"]["reasons"][0]
    if diagnosis:
        assert (
            gate["details"]["diagnosis"]["kind"] == diagnosis
            and gate["details"]["diagnosis"]["plan"]["action"] == "stop"
        )
    assert [s["name"] for s in view["steps"]][-1] == "gate"  # no merge, no final eval, no registration
    models = cli(ws, "models", "list", "--json", check=True)
    assert json.loads(models.stdout) == []


def test_a_stage_the_task_names_no_gate_for_is_judged_against_where_it_started(tmp_path, ws):
    task = write_task(
        tmp_path,
        stages=["pretrain"],
        gates={},
        training={"pretrain": {"max_steps": 40, "per_device_batch_size": 8, "seq_len": 32, "learning_rate": 3e-3}},
    )
    proc = cli(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "dflt", "--yes", "-q")
    assert proc.returncode == 0, proc.stderr[-2000:]
    outputs = _outputs(ws, "dflt")
    reasons = outputs["gate"]["details"]["reasons"]
    assert reasons[0].startswith("default gate (the task names none): heldout_loss ")
    assert "(random init " in reasons[0] and not any("no gate rules" in r for r in reasons)
    assert "(random init " in outputs["evaluate"]["summary"]  # the start's score beside the trained one


def test_a_task_file_without_a_name_is_named_after_its_file(tmp_path, ws):
    task = {k: v for k, v in TINY_TASK.items() if k != "name"}
    path = tmp_path / "my first task.yaml"
    path.write_text(yaml.safe_dump(task))
    proc = cli(ws, "execute-workflow", "train_model", "--task", str(path), "--yes", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    view = json.loads(proc.stdout)
    assert view["task_name"] == "my-first-task" and view["run_id"].startswith("my-first-task-")


def test_a_set_answer_length_shorter_than_a_held_out_answer_is_refused_before_anything_is_stored(
    tmp_path, ws, real_model
):
    """The issue's user: SmolLM2 writes ``1990-08-02`` in 10 tokens, and 8 new tokens cut every answer. A task
    that sets that length is refused at the door, naming the field and the row; no run is stored."""
    rows = [
        {
            "messages": [
                {"role": "user", "content": f"Write day {d} of March, 1990 as an ISO date."},
                {"role": "assistant", "content": f"1990-03-{d:02d}"},
            ]
        }
        for d in range(1, 13)
    ]
    for name, part in (("train.jsonl", rows[:8]), ("eval.jsonl", rows[8:])):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in part))
    task = tmp_path / "dates.yaml"
    task.write_text(
        yaml.safe_dump(
            {
                "model": {"path": str(real_model)},
                "stages": ["sft"],
                "data": {"path": str(tmp_path / "train.jsonl"), "eval_path": str(tmp_path / "eval.jsonl")},
                "training": {"sft": {"use_peft": True}},
                "eval": {"max_new_tokens": 8},
                "budget": {"max_wall_minutes": 20},
            }
        )
    )
    proc = cli(ws, "execute-workflow", "train_model", "--task", str(task), "--yes")
    assert proc.returncode == 2, proc.stderr[-2000:]
    line = proc.stderr.strip().splitlines()[-1]
    assert "eval.max_new_tokens: 8 is shorter than the answer of row 1 of eval.jsonl" in line, proc.stderr
    assert json.loads(cli(ws, "runs", "list", "--json", check=True).stdout) == []
