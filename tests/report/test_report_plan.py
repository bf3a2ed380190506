"""The report's "plan against the run" table: the planner's estimate for each trained stage beside the
training's own telemetry."""

from __future__ import annotations

from trainteam.contract.train_task import TrainTask
from trainteam.workflows.report.run_report import PlanVsRun, ReportInput, plan_vs_run, write_report

TINY_TASK = {
    "name": "tiny",
    "model": {"hidden_size": 32, "num_layers": 1, "num_heads": 2, "max_position_embeddings": 64},
    "data": {"demo": "addition", "n_train": 400, "n_eval": 16, "max_operand": 20},
    "tokenizer": {"vocab_size": 280},
    "stages": ["pretrain"],
    "budget": {"max_wall_minutes": 30},
    "training": {"pretrain": {"max_steps": 6, "per_device_batch_size": 8, "seq_len": 32}},
}


def test_the_table_shows_plan_and_run_side_by_side(tmp_path):
    row = PlanVsRun(
        stage="sft",
        steps_planned=20,
        steps_run=20,
        tokens_planned=3440,
        tokens_run=3302,
        tokens_per_s_planned=39.0,
        throughput_source="measured",
        tokens_per_s_run=31.5,
        minutes_planned=1.47,
        minutes_run=1.75,
        wall_minutes_run=1.9,
    )
    md = write_report(ReportInput(run_id="r", task_name="t", plan_vs_run=[row]), tmp_path).markdown.read_text()
    assert "| sft | 20 / 20 | 3,440 / 3,302 | 39.0 (measured) / 31.5 | 1.47 / 1.75 / 1.90 |" in md


def test_each_trained_stage_gets_the_planners_estimate(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINTEAM_CACHE_DIR", str(tmp_path / "cache"))  # no measurement stored: the guess
    task = TrainTask.model_validate(TINY_TASK)
    metrics = {
        "train.pretrain.tokens": 1536.0,
        "train.pretrain.tokens_per_s": 900.0,
        "train.pretrain.steps": 6.0,
        "train.pretrain.step_time_s": 1.7,
        "train.pretrain.wall_s": 3.0,
    }
    (row,) = plan_vs_run(task, metrics)
    assert (row.stage, row.steps_planned, row.steps_run, row.tokens_run) == ("pretrain", 6, 6, 1536)
    assert row.tokens_planned == 6 * 8 * 32 and row.throughput_source == "assumed"  # packed windows of seq_len
    assert row.minutes_run == 1.7 / 60 and row.wall_minutes_run == 3.0 / 60
    assert plan_vs_run(task, {}) == []  # a stage that never trained has no row
