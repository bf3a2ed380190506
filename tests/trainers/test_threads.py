"""Threads follow the neighbours' measured CPU use while training; fixed counts are left alone."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from trainteam.trainers import TrainConfig, train
from trainteam.trainers.threads import ThreadTuner, threads_for


def test_rule_uses_the_cores_the_neighbours_leave_free():
    assert threads_for(0.02, cores=2, current=2) == 2  # idle: all cores, no probe
    assert threads_for(1.0, cores=2, current=2) == 1  # one core busy: one thread
    assert threads_for(2.0, cores=2, current=1) == 1  # never fewer than one
    assert threads_for(3.5, cores=16, current=16) == 12
    # hysteresis around idle: a small burst neither drops all cores nor brings them back
    assert threads_for(0.2, cores=2, current=2) == 2
    assert threads_for(0.2, cores=2, current=1) == 1
    assert threads_for(0.1, cores=2, current=1) == 2


class Neighbours:
    """A scripted CPU sampler: the neighbours use ``load(step)`` cores; wall advances 1 s per call."""

    def __init__(self, load):
        self.load, self.calls, self.busy, self.wall = load, 0, 0.0, 0.0

    def __call__(self):
        self.busy += self.load(self.calls) + 1.0  # + this process's own core
        self.wall += 1.0
        self.calls += 1
        return self.busy, self.wall, self.wall  # own CPU == wall: one busy core of ours


def test_tuner_follows_the_load_during_real_training(tmp_path, tiny, tok, arith):
    seen = []
    tuner = ThreadTuner(2, start=2, window_s=1.0, first_window_s=1.0,
                        sampler=Neighbours(lambda i: 1.0 if 3 <= i < 8 else 0.0),
                        set_threads=lambda n: (seen.append(n), torch.set_num_threads(n)))
    cfg = TrainConfig(output_dir=tmp_path, max_steps=12, per_device_batch_size=8, seq_len=32, threads=1)
    rep = train("pretrain", cfg, tiny, arith[0], tokenizer=tok, callbacks=[tuner], progress=False)
    assert rep.steps_done == 12
    assert seen == [1, 2]  # a neighbour took a core: down to one thread; it left: back to both
    assert [h["threads"] for h in tuner.history] == [2, 1, 2]
    assert tuner.history[1]["neighbours_cores"] == pytest.approx(1.0)


def test_fixed_threads_are_not_tuned(tmp_path, tiny, tok, arith, monkeypatch):
    monkeypatch.setenv("TRAINTEAM_THREADS", "1")
    rep = train("pretrain", TrainConfig(output_dir=tmp_path, max_steps=2, per_device_batch_size=8, seq_len=32),
                tiny, arith[0], tokenizer=tok, progress=False)
    assert rep.telemetry["threads"] == 1 and "thread_changes" not in rep.telemetry


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nothing to choose")
def test_a_busy_neighbour_gets_its_core(tmp_path, tiny, tok, arith, monkeypatch):
    monkeypatch.delenv("TRAINTEAM_THREADS", raising=False)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        rep = train("pretrain", TrainConfig(output_dir=tmp_path, max_steps=150, per_device_batch_size=8, seq_len=32),
                    tiny, arith[0], tokenizer=tok, progress=False)
    finally:
        spinner.kill()
        spinner.wait()
    changes = rep.telemetry["thread_changes"]
    assert changes and all(c["neighbours_cores"] >= 0.7 for c in changes), changes
    assert rep.telemetry["threads"] <= (os.cpu_count() or 1) - 1
