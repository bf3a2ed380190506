"""Thread tuning while training: each candidate is measured, the faster one is kept."""

from __future__ import annotations

import torch

from trainteam.trainers import TrainConfig, train
from trainteam.trainers.threads import ThreadTuner


def test_tuner_measures_each_candidate_and_keeps_the_faster(tmp_path, tiny, tok, arith):
    tuner = ThreadTuner([1, 2], probe_steps=2, every=4)
    # step 1 warm-up; probe 1 thread (2-4), 2 threads (5-7); 4 steps; probe again (12-17)
    cfg = TrainConfig(output_dir=tmp_path, max_steps=18, per_device_batch_size=8, seq_len=32, threads=1)
    train("pretrain", cfg, tiny, arith[0], tokenizer=tok, callbacks=[tuner], progress=False)
    assert len(tuner.history) == 2  # probed at the start and again after `every` steps
    for h in tuner.history:
        assert set(h["rates"]) == {1, 2} and all(r > 0 for r in h["rates"].values())
        faster = max(h["rates"], key=h["rates"].get)
        # all cores unless one thread is clearly (>10 %) faster
        assert h["chosen"] == (1 if h["rates"][1] > 1.1 * h["rates"][2] else 2), h
        assert h["chosen"] == faster or h["rates"][1] <= 1.1 * h["rates"][2]
    assert torch.get_num_threads() == tuner.history[-1]["chosen"]


def test_fixed_threads_are_not_tuned(tmp_path, tiny, tok, arith, monkeypatch):
    monkeypatch.setenv("TRAINTEAM_THREADS", "1")
    rep = train("pretrain", TrainConfig(output_dir=tmp_path, max_steps=2, per_device_batch_size=8, seq_len=32),
                tiny, arith[0], tokenizer=tok, progress=False)
    assert rep.telemetry["threads"] == 1 and "thread_probes" not in rep.telemetry


def test_default_tunes_between_one_thread_and_all_cores(tmp_path, tiny, tok, arith, monkeypatch):
    import os

    monkeypatch.delenv("TRAINTEAM_THREADS", raising=False)
    rep = train("pretrain", TrainConfig(output_dir=tmp_path, max_steps=10, per_device_batch_size=8, seq_len=32),
                tiny, arith[0], tokenizer=tok, progress=False)
    cores = os.cpu_count() or 1
    if cores > 1:
        probe = rep.telemetry["thread_probes"][0]
        assert set(probe["rates"]) == {1, cores} and rep.telemetry["threads"] == probe["chosen"]
    else:
        assert rep.telemetry["threads"] == 1
