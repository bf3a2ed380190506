"""Trackers by config: TensorBoard event files written offline; a missing tracker is a clear error."""

from __future__ import annotations

import importlib.util

import pytest

from trainteam.errors import BadInput
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


@pytest.mark.parametrize("tracker,package", [("mlflow", "mlflow"), ("wandb", "wandb")])
def test_uninstalled_tracker_names_the_field(tmp_path, tiny, tok, arith, tracker, package):
    if importlib.util.find_spec(package) is not None:
        pytest.skip(f"{package} is installed here")
    cfg = TrainConfig(output_dir=tmp_path, max_steps=2, tracker=tracker)
    with pytest.raises(BadInput, match=f"tracker: {tracker} is not installed"):
        train("pretrain", cfg, tiny, arith[0], tokenizer=tok, progress=False)
