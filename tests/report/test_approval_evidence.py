"""A person can judge an approval: the evidence it carries, its short id, `approvals show` for people.

One real tiny run up to the register_model approval (the orchestrator's gated call), read and
decided through the real CLI in other processes.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from spine_helpers import cli, pending_approvals, spawn, wait_for, write_task

from trainteam.commands.approval_text import render_approval
from trainteam.workflows.report.evidence import approval_evidence_view, with_spike_curve

WIDE = {"COLUMNS": "150"}


def test_register_model_approval_carries_what_a_person_needs_and_its_short_id_decides_it(tmp_path, ws, background):
    run = spawn(ws, "execute-workflow", "train_model", "--task", str(write_task(tmp_path)), "--run-id", "ev1")
    background.append(run)
    (pending,) = wait_for(lambda: pending_approvals(ws), timeout=600, what="the register_model approval")
    assert pending["action"] == "register_model"

    listed = json.loads(cli(ws, "approvals", "list", "--json", check=True).stdout)
    short = listed[0]["short_id"]
    assert len(short) == 8 and listed[0]["id"] == pending["id"]
    table = cli(ws, "approvals", "list", env=WIDE, check=True).stdout
    assert short in table and "…" not in table.split("\n")[3].split("│")[1]  # the id column is whole

    shown = json.loads(cli(ws, "approvals", "show", short, "--json", check=True).stdout)
    ev = shown["evidence"]["register_model"]
    run_metrics = json.loads(cli(ws, "runs", "show", "ev1", "--json", check=True).stdout)["metrics"]
    # the metrics of the weights it registers: final_eval's, as the run measured them
    assert ev["metrics"] and ev["metrics"] == {
        k[len("final_eval.") :]: v for k, v in run_metrics.items() if k.startswith("final_eval.")
    }
    assert [(g["step"], g["passed"]) for g in ev["gates"]] == [("gate", True), ("gate_final", True)]
    assert any("heldout_loss" in r for r in ev["gates"][0]["reasons"])  # TINY_TASK gates on the held-out loss
    # the checkpoint: its path and the sha256 of the weights file there
    folder = Path(ev["checkpoint"]["path"])
    (weights,) = folder.glob("*.safetensors")
    assert ev["checkpoint"]["files"] == [
        {
            "name": weights.name,
            "bytes": weights.stat().st_size,
            "sha256": hashlib.sha256(weights.read_bytes()).hexdigest(),
        }
    ]
    assert ev["checkpoint"]["node"].startswith("Checkpoint:" + ev["checkpoint"]["weights_hash"][:16])
    # the data lineage from the knowledge graph
    kinds = {n["kind"] for n in ev["lineage"]["nodes"]}
    assert {"DatasetVersion", "Corpus", "Tokenizer", "Run", "Checkpoint"} <= kinds
    assert ev["lineage"]["of"] == ev["checkpoint"]["node"]

    text = cli(ws, "approvals", "show", short[:6], env=WIDE, check=True).stdout
    for name in ("exact_match", "heldout_loss"):
        assert name in text and f"{ev['metrics'][name]:.4g}" in text
    assert "gate_final" in text and "pass" in text
    assert str(folder) in text and ev["checkpoint"]["files"][0]["sha256"] in text
    assert "DatasetVersion" in text and "Tokenizer" in text

    too_short = cli(ws, "approvals", "approve", short[:5])
    assert too_short.returncode == 2 and "not found" in too_short.stderr
    decided = json.loads(cli(ws, "approvals", "approve", short[:6], "--by", "ada", "--json", check=True).stdout)
    assert decided["id"] == pending["id"] and decided["status"] == "approved" and decided["short_id"] == short
    assert run.wait(timeout=600) == 0
    assert f"`trainteam approvals show {short}`" in run.stderr.read()  # the run says where the evidence is
    again = cli(ws, "approvals", "reject", short)
    assert again.returncode == 2 and "already approved by ada" in again.stderr


def _row(action: str, proposed: dict, evidence: dict) -> dict:
    return {
        "id": f"r1.train.1.{action}",
        "run_id": "r1",
        "step": "train",
        "action": action,
        "status": "pending",
        "proposed": proposed,
        "evidence": evidence,
        "requested_by": "training_engineer",
        "created_at": "2026-12-02T10:00:00",
        "decided_by": None,
        "decided_at": None,
        "note": None,
    }


def test_a_spike_approval_shows_the_curve_around_the_spike_and_a_budget_one_the_spend():
    from rich.console import Console

    losses = {"pretrain": [[s, 2.0 - s * 0.01] for s in range(1, 40)] + [[40, 9.5]] + [[s, 1.6] for s in range(41, 50)]}
    proposed = {"stage": "pretrain", "spike_step": 40, "reason": "spike at step 40"}
    monitor = {
        "step": 40,
        "metric": "loss",
        "value": 9.5,
        "window_mean": 1.7,
        "window_std": 0.05,
        "z": 31.0,
        "rule": ">6 spreads",
    }
    stored = with_spike_curve({"monitor": monitor, "spikes": [monitor]}, proposed, losses)
    view = approval_evidence_view(_row("restart_after_spike_1", proposed, json.loads(json.dumps(stored))))
    assert [p.step for p in view.spike.curve] == list(range(28, 44))  # 12 before, the spike, 3 after
    assert view.spike.curve[12].loss == 9.5 and view.spike.z == 31.0
    console = Console(width=150, record=True, color_system=None)
    render_approval(console, view)
    text = console.export_text()
    assert "at step 40" in text and "40:9.5" in text and "39:1.61" in text and "█" in text

    budget = approval_evidence_view(
        _row(
            "exceed_budget",
            {"continue_with": "train", "extra_minutes": 15.0},
            {
                "spent": {"seconds": 1830.0, "cost_usd": 0.0},
                "allowed_minutes": 30.0,
                "budget": {"max_wall_minutes": 30.0, "max_cost_usd": 0.0},
            },
        )
    )
    assert (budget.budget.spent_seconds, budget.budget.allowed_minutes, budget.budget.extra_minutes) == (
        1830.0,
        30.0,
        15.0,
    )
    console = Console(width=150, record=True, color_system=None)
    render_approval(console, budget)
    assert "spent 30.5 min of 30 min allowed" in console.export_text()
    inside = approval_evidence_view(
        _row(
            "exceed_budget_1",
            {"continue_with": "train", "extra_minutes": 15.0},
            {
                "where": "training pretrain",
                "step": 120,
                "overrun_s": 4.5,
                "allowed_minutes": 30.0,
                "budget": {"max_wall_minutes": 30.0},
            },
        )
    )  # stopped by the ceiling inside training
    assert inside.budget.spent_seconds == 1804.5 and inside.budget.where == "training pretrain"
    console = Console(width=150, record=True, color_system=None)
    render_approval(console, inside)
    text = console.export_text()  # the budget section says each figure once
    assert "over by 4 s" in text or "over by 5 s" in text
    assert text.count("overrun_s") == 0 and text.count("training pretrain") <= 1
