"""A failed gate's retry follows the judge's diagnosis: a real tiny run whose stage under-fits
(6 steps), retrained with the plan's steps (4×, not "twice as long"), and a person asked to accept
the second failure sees the diagnosis and plan; the run report shows both diagnoses."""

from __future__ import annotations

import json

from spine_helpers import cli, pending_approvals, spawn, wait_for, write_task


def test_an_under_fit_stage_is_retrained_with_the_plans_steps_and_the_person_sees_the_diagnosis(
    tmp_path, ws, background
):
    task = write_task(
        tmp_path, allow_retry=True, on_gate_failure="ask", gates={"pretrain": {"metric": "exact_match", "min": 1.0}}
    )
    run = spawn(ws, "execute-workflow", "train_model", "--task", str(task), "--run-id", "r-retry", "-q")
    background.append(run)
    pending = wait_for(lambda: pending_approvals(ws), timeout=600, what="the second failed gate's approval")
    assert [(a["step"], a["action"]) for a in pending] == [("gate", "accept_failed_gate")]
    evidence = pending[0]["evidence"]
    assert evidence["diagnosis"]["kind"] == "under_fit" and evidence["diagnosis"]["evidence"]["steps"] == 24
    assert evidence["plan"] == {
        "action": "more_steps",
        "stage": "pretrain",
        "reason": evidence["plan"]["reason"],
        "changes": {"max_steps": 96, "num_train_epochs": None, "learning_rate": None, "warmup_steps": None},
    }
    cli(ws, "approvals", "reject", pending[0]["id"], "--by", "ana", check=True)
    assert run.wait(timeout=600) == 1

    from trainteam.workflows.engine.store import RunStore
    from trainteam.workflows.report.run_report import write_run_report
    from trainteam.workspace import Workspace

    attempts = RunStore(Workspace.open(ws).engine).attempts("r-retry")
    gates = [a["output"] for a in attempts if a["step"] == "gate"]
    first = gates[0]["details"]["diagnosis"]
    assert (first["kind"], first["plan"]["action"], first["plan"]["changes"]["max_steps"]) == (
        "under_fit",
        "more_steps",
        24,
    )
    assert "diagnosis under-fit" in gates[0]["summary"] and "plan: more steps (max_steps 24)" in gates[0]["summary"]
    assert any(r.startswith("judge: diagnosis under-fit") for r in gates[0]["details"]["persona"]["reasons"])
    retrained = [a["output"] for a in attempts if a["step"] == "train"][1]
    assert retrained["metrics"]["pretrain.max_steps"] == 24 and retrained["metrics"]["pretrain.steps"] == 24
    assert "pretrain retried after under-fit: more steps (max_steps 24)" in retrained["summary"]
    folder = ws / "checkpoints" / "r-retry" / "pretrain-v2"
    state = json.loads((folder / "checkpoint-24" / "trainer_state.json").read_text())
    assert (state["global_step"], state["max_steps"]) == (24, 24)

    text = write_run_report(Workspace.open(ws), "r-retry").markdown.read_text()
    section = text[text.index("## Diagnosis") :]
    assert "**gate #1** (pretrain): under_fit" in section and "**gate #2** (pretrain): under_fit" in section
    assert "plan: more steps (max_steps 24)" in section and "plan: more steps (max_steps 96)" in section
    assert "evidence: first_loss" in section and "steps 24" in section
