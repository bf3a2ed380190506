"""Trackers by config: TensorBoard events and an MLflow file store written offline; a missing tracker is a clear
error."""

from __future__ import annotations

import importlib.util

import pytest

from trainteam.core.errors import BadInput
from trainteam.trainers import TrainConfig, train


def test_tensorboard_events_written(tmp_path, tiny, tok, arith):
    cfg = TrainConfig(output_dir=tmp_path, max_steps=3, per_device_batch_size=8, seq_len=32, tracker="tensorboard")
    train("pretrain", cfg, tiny, arith[0], tokenizer=tok, progress=False)
    events = list((tmp_path / "tensorboard").rglob("events.out.tfevents.*"))
    assert events and events[0].stat().st_size > 0
    assert [s for s, _ in _scalars(events[0], "train/loss")] == [1, 2, 3]


def _scalars(path, tag):
    """Read (step, value) of one tag from a TFRecord event file with tensorboardX's protos."""
    import struct

    from tensorboardX.proto.event_pb2 import Event

    out, data = [], path.read_bytes()
    i = 0
    while i < len(data):
        (n,) = struct.unpack("<Q", data[i : i + 8])
        ev = Event.FromString(data[i + 12 : i + 12 + n])
        i += 12 + n + 4
        for v in ev.summary.value:
            if v.tag == tag:
                out.append((ev.step, v.simple_value))
    return out


@pytest.fixture
def no_mlflow_env(monkeypatch):
    """No MLflow settings from outside (nothing remote); what train() sets is undone afterwards."""
    for var in ("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_ALLOW_FILE_STORE"):
        monkeypatch.setenv(var, "")  # remembers the original state for the teardown
        monkeypatch.delenv(var)


def test_mlflow_file_store_under_the_run_folder(tmp_path, tiny, tok, arith, no_mlflow_env):
    pytest.importorskip("mlflow")  # the `tracking` extra; `make setup` installs it with the tests
    from mlflow import MlflowClient

    runs = []
    for name in ("a", "b"):  # two runs in one process: each logs into its own folder
        out = tmp_path / name
        cfg = TrainConfig(output_dir=out, max_steps=3, per_device_batch_size=8, seq_len=32, tracker="mlflow")
        rep = train("pretrain", cfg, tiny, arith[0], tokenizer=tok, progress=False)
        uri = (out / "mlruns").resolve().as_uri()
        assert uri.startswith("file:") and (out / "mlruns").is_dir()
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name("trainteam")
        (run,) = client.search_runs([exp.experiment_id])
        # MLflow returns the history in timestamp order; steps logged in the same millisecond tie
        loss = sorted(client.get_metric_history(run.info.run_id, "loss"), key=lambda m: m.step)
        assert [m.step for m in loss] == [1, 2, 3]
        assert [m.value for m in loss] == pytest.approx([v for _, v in rep.losses])
        assert run.data.params["max_steps"] == "3" and run.info.run_name == name
        assert run.info.status == "FINISHED"
        runs.append(run.info.run_id)
    assert runs[0] != runs[1]


def test_user_mlflow_uri_is_kept(tmp_path, monkeypatch, no_mlflow_env):
    from trainteam.trainers.training.tracking import tracking_args

    monkeypatch.setattr("trainteam.trainers.training.tracking.installed", lambda tracker: True)
    mine = (tmp_path / "elsewhere").resolve().as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mine)
    assert tracking_args("mlflow", tmp_path / "run") == {"report_to": ["mlflow"], "run_name": "run"}
    import os

    assert os.environ["MLFLOW_TRACKING_URI"] == mine


@pytest.mark.parametrize("tracker,pip", [("mlflow", "'trainteam[tracking]'"), ("wandb", "wandb")])
def test_uninstalled_tracker_names_the_field(tmp_path, tiny, tok, arith, tracker, pip, monkeypatch):
    real = importlib.util.find_spec
    missing = {"mlflow": "mlflow", "wandb": "wandb"}[tracker]
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == missing else real(name, *a))
    cfg = TrainConfig(output_dir=tmp_path, max_steps=2, tracker=tracker)
    with pytest.raises(BadInput) as err:
        train("pretrain", cfg, tiny, arith[0], tokenizer=tok, progress=False)
    msg = str(err.value)
    assert msg == f"tracker: {tracker} is not installed (pip install {pip})" and "\n" not in msg
    assert not list(tmp_path.glob("checkpoint-*"))  # refused before any work
