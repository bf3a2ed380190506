"""Checkpoints verify before they are resumed from: a manifest written last (sizes, sha256), and
for checkpoints without one, sound safetensors headers. A damaged newest checkpoint makes
resume="auto" use the older intact one and say so; an explicit resume to it is one BadInput."""

from __future__ import annotations

import json
import logging
import shutil
import time

import pytest

from trainteam.core.errors import BadInput
from trainteam.trainers import ModelSpec, TrainConfig, build_model, train
from trainteam.trainers.training.checkpoints import damage, is_complete, latest_complete, resolve_resume
from trainteam.trainers.training.manifest import MANIFEST, safetensors_problem, write_manifest
from trainteam.trainers.training.restart import prepare_rollback
from trainteam.trainers.training.results import RestartProposal


def _cfg(out, **kw):
    return TrainConfig(
        output_dir=out,
        max_steps=8,
        per_device_batch_size=8,
        learning_rate=3e-3,
        seq_len=32,
        save_steps=4,
        save_total_limit=5,
        **kw,
    )


def _model(tok):
    return build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128), tok)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """One real 8-step run saving checkpoint-4 and checkpoint-8 (copied afresh for each test)."""
    import torch

    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
    from trainteam.trainers import TokenizerConfig, load_tokenizer, train_tokenizer

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("manifest")
    rows, _ = generate_arithmetic(ArithmeticConfig(n_train=200, n_eval=8, seed=1))
    tok = load_tokenizer(
        train_tokenizer((r["prompt"] + r["completion"] for r in rows), TokenizerConfig(vocab_size=300), root / "tok")
    )
    rep = train("pretrain", _cfg(root / "run"), _model(tok), rows, tokenizer=tok, progress=False)
    assert [c.name for c in rep.checkpoints] == ["checkpoint-4", "checkpoint-8"]
    return root / "run", tok, rows


@pytest.fixture
def run(saved, tmp_path):
    out = tmp_path / "run"
    shutil.copytree(saved[0], out)
    return out


def test_manifest_is_written_last_and_lists_every_file(saved):
    for ckpt in (saved[0] / "checkpoint-4", saved[0] / "checkpoint-8"):  # as training left them
        files = json.loads((ckpt / MANIFEST).read_text())["files"]
        others = [p for p in ckpt.rglob("*") if p.is_file() and p.name != MANIFEST]
        assert sorted(files) == sorted(p.relative_to(ckpt).as_posix() for p in others)
        assert {"trainer_state.json", "model.safetensors", "optimizer.pt"} <= set(files)
        assert all(files[p.relative_to(ckpt).as_posix()]["size"] == p.stat().st_size for p in others)
        assert (ckpt / MANIFEST).stat().st_mtime_ns >= max(p.stat().st_mtime_ns for p in others)  # written last
        assert is_complete(ckpt) and damage(ckpt) is None


def test_a_changed_byte_is_caught_by_the_hash(run):
    opt = run / "checkpoint-8" / "optimizer.pt"
    data = bytearray(opt.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the sha256 tells
    opt.write_bytes(bytes(data))
    assert damage(run / "checkpoint-8") == "optimizer.pt: sha256 differs from the manifest"
    assert is_complete(run / "checkpoint-8", hashes=False)  # listing does not hash
    assert not is_complete(run / "checkpoint-8")


@pytest.mark.parametrize("how", ["truncated", "zeroed"])
def test_damaged_newest_weights_resume_auto_from_the_older_one_and_say_so(how, run, saved, caplog):
    _, tok, rows = saved
    weights = run / "checkpoint-8" / "model.safetensors"
    size = weights.stat().st_size
    if how == "truncated":
        with open(weights, "r+b") as fh:
            fh.truncate(size // 2)
    else:
        weights.write_bytes(bytes(size))
    with caplog.at_level(logging.WARNING, logger="trainteam.trainers"):
        rep = train("pretrain", _cfg(run), _model(tok), rows, tokenizer=tok, progress=False)
    assert rep.resumed_from == run / "checkpoint-4" and rep.losses[0][0] == 5 and rep.steps_done == 8
    warning = next(r.getMessage() for r in caplog.records if "damaged" in r.getMessage())
    assert str(run / "checkpoint-8") in warning and "model.safetensors" in warning
    assert f"resuming from {run / 'checkpoint-4'}" in warning and "damaged-8" in warning
    assert (run / "damaged-8" / "model.safetensors").stat().st_size == (size // 2 if how == "truncated" else size)
    assert is_complete(run / "checkpoint-8")  # saved afresh by the resumed run, with its manifest


@pytest.mark.parametrize("how", ["truncated", "zeroed"])
def test_checkpoint_without_manifest_gets_the_header_check(how, run):
    ckpt = run / "checkpoint-8"
    (ckpt / MANIFEST).unlink()  # as saved before manifests existed
    assert is_complete(ckpt) and safetensors_problem(ckpt / "model.safetensors") is None
    weights = ckpt / "model.safetensors"
    size = weights.stat().st_size
    if how == "truncated":
        weights.write_bytes(weights.read_bytes()[: size - 1])
        assert damage(ckpt) == f"model.safetensors: {size - 1} bytes, its header says {size} (truncated or padded)"
    else:
        weights.write_bytes(bytes(size))
        assert damage(ckpt) == f"model.safetensors: header length 0 does not fit the file ({size} bytes)"
    assert latest_complete(run) == run / "checkpoint-4"


def test_explicit_resume_to_a_damaged_checkpoint_is_one_line_naming_the_file(run, saved):
    _, tok, rows = saved
    ckpt = run / "checkpoint-8"
    with open(ckpt / "model.safetensors", "r+b") as fh:
        fh.truncate(100)
    with pytest.raises(BadInput) as exc:
        train("pretrain", _cfg(run, resume=ckpt), _model(tok), rows, tokenizer=tok, progress=False)
    msg = str(exc.value)
    assert msg.startswith(f"resume: {ckpt} is damaged: model.safetensors: 100 bytes, the manifest says ")
    assert "\n" not in msg and ckpt.is_dir()  # an explicit path is refused, not moved


def test_rollbacks_go_through_the_same_verification(run, caplog):
    proposal = RestartProposal(
        spike_step=7, rollback_checkpoint=run / "checkpoint-4", skip_batches=2, lr_scale=0.5, reason="test"
    )
    rollback = prepare_rollback(proposal, run)
    assert rollback == run / "rollback-7" and is_complete(rollback)  # its rewritten files are not hash-checked
    shutil.rmtree(run / "checkpoint-8")
    assert latest_complete(run) == rollback
    weights = rollback / "model.safetensors"  # a hard link to checkpoint-4's: replace, do not write through
    data = weights.read_bytes()
    weights.unlink()
    weights.write_bytes(data[:64])
    with caplog.at_level(logging.WARNING, logger="trainteam.trainers"):
        assert resolve_resume("auto", run) == run / "checkpoint-4"
    assert "rollback" in caplog.text and "model.safetensors" in caplog.text
    assert (run / "damaged-rollback-7").is_dir() and not rollback.exists()
    # The source is hashed before it is copied: a damaged one is refused.
    (run / "checkpoint-4" / "rng_state.pth").write_bytes(b"\0")
    with pytest.raises(BadInput, match="not a complete checkpoint"):
        prepare_rollback(proposal, run)


def test_hashing_cost_of_a_tiny_checkpoint(run):
    ckpt = run / "checkpoint-8"
    t0 = time.perf_counter()
    write_manifest(ckpt)
    t1 = time.perf_counter()
    assert damage(ckpt) is None
    t2 = time.perf_counter()
    total = sum(p.stat().st_size for p in ckpt.rglob("*") if p.is_file())
    print(f"\nhash: {total / 1e6:.2f} MB, write {1e3 * (t1 - t0):.1f} ms, verify {1e3 * (t2 - t1):.1f} ms")
    assert t1 - t0 < 1.0 and t2 - t1 < 1.0
