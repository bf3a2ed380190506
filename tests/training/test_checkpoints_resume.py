"""kill -9 during training, then resume="auto" continues from the right step, bit-exact."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainteam.core.errors import BadInput
from trainteam.trainers import ModelSpec, TrainConfig, build_model, train
from trainteam.trainers.training.checkpoints import is_complete, latest_complete

HERE = Path(__file__).parent


def _cfg(out, **kw):
    return TrainConfig(
        output_dir=out,
        max_steps=16,
        per_device_batch_size=8,
        learning_rate=3e-3,
        seq_len=32,
        save_steps=4,
        save_total_limit=5,
        **kw,
    )


def _model(tok):
    return build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128), tok)


def test_kill9_then_auto_resume_continues_from_latest_complete_checkpoint(tmp_path, tok_dir, tok, arith):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in arith[0]))
    out = tmp_path / "run"
    out.mkdir()
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "_train_until_killed.py"), str(tok_dir), str(data), str(out), "8"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 120
        while not (out / "hanging").exists():
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.time() < deadline, "training subprocess never reached step 8"
            time.sleep(0.2)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    assert is_complete(out / "checkpoint-8")
    # A save cut short by the kill: weights written, trainer state never.
    partial = out / "checkpoint-12"
    partial.mkdir()
    shutil.copy(out / "checkpoint-8" / "model.safetensors", partial / "model.safetensors")

    resumed = train("pretrain", _cfg(out), _model(tok), data, tokenizer=tok, progress=False)
    assert resumed.resumed_from == out / "checkpoint-8"
    assert resumed.losses[0][0] == 9 and resumed.steps_done == 16
    assert (out / "incomplete-12").is_dir() and is_complete(partial)  # moved aside, then saved afresh
    assert resumed.telemetry["interruptions"] == 1
    assert 0 < resumed.telemetry["run_goodput"] <= 1

    reference = train("pretrain", _cfg(tmp_path / "ref"), _model(tok), data, tokenizer=tok, progress=False)
    ref = dict(reference.losses)
    for step, loss in resumed.losses:
        assert loss == pytest.approx(ref[step], rel=1e-5), step


def test_incomplete_checkpoint_is_skipped_with_a_warning(tmp_path, caplog):
    good = tmp_path / "checkpoint-4"
    good.mkdir()
    (good / "trainer_state.json").write_text(json.dumps({"global_step": 4}))
    (good / "model.safetensors").write_bytes(b"\x02" + bytes(7) + b"{}")  # a sound safetensors file of no tensors
    bad = tmp_path / "checkpoint-8"
    bad.mkdir()
    (bad / "trainer_state.json").write_text('{"global_st')  # truncated mid-write
    (bad / "model.safetensors").write_bytes(b"x")
    with caplog.at_level(logging.WARNING, logger="trainteam.trainers"):
        assert latest_complete(tmp_path) == good
    assert "checkpoint-8" in caplog.text and "incomplete" in caplog.text


def test_resume_from_explicit_bad_path_names_the_field(tmp_path, tok, arith):
    with pytest.raises(BadInput, match="resume:"):
        train(
            "pretrain", _cfg(tmp_path, resume=tmp_path / "nope"), _model(tok), arith[0], tokenizer=tok, progress=False
        )


def test_sigterm_saves_and_stops_cleanly(tmp_path, tok_dir, arith):
    from trainteam.trainers import TrainReport

    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in arith[0]))
    out = tmp_path / "run"
    out.mkdir()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "_train_until_signalled.py"), str(tok_dir), str(data), str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 120
    while not (out / "beacon").exists() or int((out / "beacon").read_text() or 0) < 3:
        assert proc.poll() is None and time.time() < deadline
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=600)
    assert proc.returncode == 0, stderr[-2000:]
    rep = TrainReport.model_validate_json(next(ln for ln in stdout.splitlines() if ln.startswith("REPORT "))[7:])
    assert rep.stopped_reason == "interrupted" and 3 <= rep.steps_done < 500
    assert rep.checkpoints == [out / f"checkpoint-{rep.steps_done}"]  # saved where it stopped
    assert is_complete(rep.checkpoints[0]) and rep.final_dir == rep.checkpoints[0]
    assert (rep.final_dir / "tokenizer.json").is_file() and not (out / "final").exists()


def test_run_goodput_counts_lost_work_as_lost(tmp_path):
    from trainteam.trainers.training.telemetry import RunHistory

    lines = [
        {"event": "start", "time": 100.0, "resume_step": 0, "setup_s": 1.0},
        {"event": "save", "time": 103.0, "step": 4, "step_time": 2.0},
        {"event": "beat", "time": 105.0, "step": 6, "step_time": 3.0},  # then kill -9: steps 5-6 lost
        {"event": "start", "time": 200.0, "resume_step": 4, "setup_s": 1.0},
    ]
    path = tmp_path / "run-history.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines[:3]))
    h = RunHistory(tmp_path)
    assert h.interruptions() == 1  # counted when the next attempt starts
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    # kept: 2.0 s of attempt 1 (up to the checkpoint resumed from) + 4.0 s now; wall: (5 + 1) + 6 s
    assert h.run_goodput(current_step_time=4.0, current_wall=6.0) == pytest.approx(6.0 / 12.0)
