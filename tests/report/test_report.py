"""The run report: markdown and PNG plots whose JSON data hold the recorded values."""

from __future__ import annotations

import json

from trainteam.trainers.evaluation.gates import GateRule
from trainteam.workflows.report.run_report import GateOutcome, LossEvent, ReportInput, StepRecord, write_report


def _input() -> ReportInput:
    return ReportInput(
        run_id="run-42",
        task_name="demo-addition",
        status="completed",
        steps=[
            StepRecord(name="curate", persona="data_curator", status="completed", seconds=1.5, cost=0.0),
            StepRecord(name="train_sft", persona="training_engineer", status="completed", seconds=110.0, cost=0.012),
            StepRecord(name="gate_sft", persona="eval_judge", status="failed", seconds=0.2),
        ],
        losses={"sft": [(0, 3.2), (1, 2.9), (2, 7.5), (3, 2.7)], "grpo": [(0, 0.4), (1, 0.35)]},
        events=[LossEvent(stage="sft", step=2, kind="spike"),
                LossEvent(stage="sft", step=3, kind="restart", note="rolled back to step 1")],
        evals={"sft": {"exact_match": 0.93, "heldout_loss": 0.31}, "grpo": {"exact_match": 0.97}},
        gates={"sft": [GateRule(metric="exact_match", min=0.95)], "grpo": [GateRule(metric="exact_match", min=0.95)]},
        gate_outcomes={"sft": GateOutcome(passed=False, reasons=["exact_match 0.93 < min 0.95"], accepted_by="ana")},
    )


def test_report_plots_exist_and_hold_the_recorded_values(tmp_path):
    files = write_report(_input(), tmp_path / "rep")
    for name in ("loss", "evals", "steps"):
        png = files.plots[name]
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5000
        assert files.data[name] == png.with_suffix(".json")
    loss = json.loads(files.data["loss"].read_text())
    assert loss["stages"]["sft"]["losses"] == [3.2, 2.9, 7.5, 2.7]
    assert loss["stages"]["grpo"]["offset"] == 4  # stages follow one another on the x axis
    assert loss["spikes"] == [{"stage": "sft", "step": 2, "global_step": 2, "loss": 7.5, "note": ""}]
    assert loss["restarts"][0]["note"] == "rolled back to step 1"
    evals = json.loads(files.data["evals"].read_text())
    assert evals["exact_match"] == {"stages": ["sft", "grpo"], "values": [0.93, 0.97],
                                    "thresholds": {"sft": {"min": 0.95}, "grpo": {"min": 0.95}},
                                    "meets_threshold": [False, True]}
    steps = json.loads(files.data["steps"].read_text())
    assert steps["seconds"] == [1.5, 110.0, 0.2] and steps["cost"] == [0.0, 0.012, 0.0]


def test_markdown_tells_the_run_at_a_glance(tmp_path):
    md = write_report(_input(), tmp_path).markdown.read_text()
    assert md.startswith("# Run run-42 — demo-addition")
    assert "| train_sft | training_engineer | completed | 110.0 | 0.0120 |" in md
    assert "| sft | exact_match | 0.93 | higher | min 0.95 |" in md  # its direction: the metric registry's
    assert "gate **sft**: FAILED (accepted by ana)" in md
    assert "spike in sft at step 2" in md
    for png in ("loss.png", "evals.png", "steps.png"):
        assert f"]({png})" in md


def test_empty_run_still_writes_a_report(tmp_path):
    files = write_report(ReportInput(run_id="r0", task_name="t"), tmp_path)
    assert files.plots == {} and files.markdown.read_text().startswith("# Run r0 — t")



def test_the_sealed_test_is_shown_as_the_figure_to_trust_with_its_gap(tmp_path):
    from trainteam.workflows.report.run_report import SealedTest

    sealed = SealedTest(rows=20, sizing="60 held-out rows: 40 dev, 20 sealed test", metrics={"rouge_l": 0.66,
                        "rouge_l_se": 0.02}, gap={"rouge_l": -0.04}, pairwise="pairwise judge: off (no provider)")
    md = write_report(_input().model_copy(update={"sealed_test": sealed}), tmp_path).markdown.read_text()
    assert "## Sealed test — the figures to trust" in md and "60 held-out rows: 40 dev, 20 sealed test" in md
    assert "| rouge_l | 0.66 | 0.7 | -0.04 |" in md and "rouge_l_se" not in md.split("## Sealed test")[1]
    assert "pairwise judge: off (no provider)" in md
