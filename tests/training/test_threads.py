"""Threads: chosen from the neighbours' measured CPU use when training starts, then fixed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch
from transformers import TrainerCallback

from trainteam.trainers import TrainConfig, train
from trainteam.trainers.training.threads import threads_for


def test_rule_uses_the_cores_the_neighbours_leave_free():
    assert threads_for(0.02, cores=2, current=2) == 2  # idle: all cores, no probe
    assert threads_for(1.0, cores=2, current=2) == 1  # one core busy: one thread
    assert threads_for(2.0, cores=2, current=1) == 1  # never fewer than one
    assert threads_for(3.5, cores=16, current=16) == 12
    # hysteresis around idle: a small burst neither drops all cores nor brings them back
    assert threads_for(0.2, cores=2, current=2) == 2
    assert threads_for(0.2, cores=2, current=1) == 1
    assert threads_for(0.1, cores=2, current=1) == 2


class ThreadLog(TrainerCallback):
    def __init__(self):
        self.seen: list[int] = []

    def on_step_end(self, args, state, control, **kw):
        self.seen.append(torch.get_num_threads())


def test_fixed_threads_stay_fixed_for_the_whole_training(tmp_path, tiny, tok, arith, monkeypatch):
    monkeypatch.setenv("TRAINTEAM_THREADS", "2")
    log = ThreadLog()
    rep = train(
        "pretrain",
        TrainConfig(output_dir=tmp_path, max_steps=6, per_device_batch_size=8, seq_len=32, threads=1),
        tiny,
        arith[0],
        tokenizer=tok,
        progress=False,
        callbacks=[log],
    )
    assert rep.telemetry["threads"] == 1 and log.seen == [1] * 6  # the config's count wins over the environment


def test_same_config_same_threads_same_weights(tmp_path, tok, arith):
    """What the README promises: the same task on the same thread count gives the same weights."""
    from safetensors.torch import load_file

    from trainteam.trainers import ModelSpec, build_model

    def run(name):
        model = build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128), tok)
        cfg = TrainConfig(output_dir=tmp_path / name, max_steps=8, per_device_batch_size=8, seq_len=32, threads=1)
        return load_file(
            train("sft", cfg, model, arith[0], tokenizer=tok, progress=False).final_dir / "model.safetensors"
        )

    a, b = run("a"), run("b")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: nothing to choose")
def test_a_busy_neighbour_gets_its_core_and_the_count_then_stays(tmp_path, tiny, tok, arith, monkeypatch):
    monkeypatch.delenv("TRAINTEAM_THREADS", raising=False)
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    log = ThreadLog()
    try:
        import time

        time.sleep(0.5)  # the neighbour is busy before training starts
        rep = train(
            "pretrain",
            TrainConfig(output_dir=tmp_path, max_steps=20, per_device_batch_size=8, seq_len=32),
            tiny,
            arith[0],
            tokenizer=tok,
            progress=False,
            callbacks=[log],
        )
    finally:
        spinner.kill()
        spinner.wait()
    assert rep.telemetry["threads"] <= (os.cpu_count() or 1) - 1
    assert set(log.seen) == {rep.telemetry["threads"]}  # chosen once, never changed while training


def test_one_rule_for_the_run_and_its_trainer(monkeypatch):
    """The engine fixes a run's count and the trainer sets torch's by the same rule (``threads.run_threads``)."""
    from trainteam.trainers.training.threads import run_threads
    from trainteam.trainers.training.trainer_args import choose_threads

    for var in ("LOCAL_WORLD_SIZE", "WORLD_SIZE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("TRAINTEAM_THREADS", "3")
    assert run_threads(None) == 3 and run_threads(2) == 2  # the task's (or the run's recorded) count wins
    monkeypatch.setenv("TRAINTEAM_THREADS", "0")  # unset in effect: measured, never 0 threads
    assert 1 <= run_threads(None, sample_s=0.05) <= (os.cpu_count() or 1)
    monkeypatch.delenv("TRAINTEAM_THREADS")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert run_threads(None) == max(1, (os.cpu_count() or 1) // 2)  # launched ranks share the node's cores
    monkeypatch.delenv("LOCAL_WORLD_SIZE")
    before = torch.get_num_threads()
    try:
        monkeypatch.setenv("TRAINTEAM_THREADS", "1")
        assert choose_threads(TrainConfig(output_dir=".")) == 1 == torch.get_num_threads()
    finally:
        torch.set_num_threads(before)
