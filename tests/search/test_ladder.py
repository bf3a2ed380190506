"""Ladder pre-check: a brief proxy run tells good custom data from bad, with the numbers."""

from __future__ import annotations

import random

import pytest

from trainteam.core.errors import BadInput
from trainteam.trainers.planning import HardwareSpec, plan
from trainteam.trainers.search.ladder import compare_datasets, ladder_precheck, model_ladder
from trainteam.trainers.training.config import ModelSpec, TrainConfig

TARGET = ModelSpec(hidden_size=128, num_layers=2, num_heads=4, max_position_embeddings=128)


def test_model_ladder_halves_width_and_depth_keeping_head_size():
    rungs = model_ladder(ModelSpec(hidden_size=512, num_layers=8, num_heads=8, num_kv_heads=2), 3)
    assert [(s.hidden_size, s.num_layers, s.num_heads, s.num_kv_heads) for s in rungs] == [
        (128, 2, 2, 1),
        (256, 4, 4, 1),
        (512, 8, 8, 2),
    ]
    assert model_ladder(TARGET, 3)[0].hidden_size == 32  # floor at min_hidden
    with pytest.raises(BadInput, match="^rungs: "):
        model_ladder(TARGET, 0)


def test_proxy_runs_tell_good_data_from_garbage(tmp_path, tok, arith):
    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic

    reference = arith[0]
    good, _ = generate_arithmetic(ArithmeticConfig(n_train=600, n_eval=40, seed=7))
    rng = random.Random(0)
    garbage = [
        {
            "prompt": "".join(rng.choice("abcxyz") for _ in range(6)),
            "completion": "".join(rng.choice("qwerty") for _ in range(3)),
        }
        for _ in range(600)
    ]
    cfg = TrainConfig(
        max_steps=20, per_device_batch_size=16, learning_rate=3e-3, seq_len=64, threads=1, spike={"enabled": False}
    )
    run_plan = plan(TrainConfig(), TARGET, HardwareSpec(device="cpu"), vocab_size=len(tok))
    verdicts = compare_datasets(
        {"good": good, "garbage": garbage}, reference, tokenizer=tok, model=run_plan, work_dir=tmp_path, config=cfg
    )
    g, bad = verdicts["good"], verdicts["garbage"]
    assert g.reference == bad.reference  # one shared reference run
    assert g.proxy.hidden_size == 32 and g.custom.steps == 20
    # no eval_data: 10 % of the reference is held out and never trained on
    assert g.heldout_rows == 60 and g.reference.rows == 540 and "held-out reference" in g.heldout
    assert g.verdict == "comparable" and g.accept
    assert g.ratio == pytest.approx(g.custom.heldout_loss / g.reference.heldout_loss)
    assert bad.verdict == "worse" and not bad.accept and bad.ratio > 1.2
    assert any("held-out loss" in r for r in bad.reasons)


def test_precheck_holds_out_part_of_the_reference_and_rejects_bad_input(tmp_path, tok, arith):
    with pytest.raises(BadInput, match="^heldout_fraction: "):
        ladder_precheck(arith[0], arith[0], tokenizer=tok, model=TARGET, work_dir=tmp_path, heldout_fraction=1.5)
    with pytest.raises(BadInput, match="^custom: .*sft-shaped|^custom: .*pretrain-shaped"):
        ladder_precheck(
            [{"text": "12+3=15"}] * 10,
            arith[0],
            tokenizer=tok,
            model=TARGET,
            work_dir=tmp_path,
            config=TrainConfig(max_steps=2, per_device_batch_size=4, seq_len=64, threads=1),
        )
    with pytest.raises(BadInput, match="^reference: "):
        ladder_precheck(arith[0], [], tokenizer=tok, model=TARGET, work_dir=tmp_path)
    counted = plan(TrainConfig(), 1_000_000, HardwareSpec(device="cpu"))
    with pytest.raises(BadInput, match="^model: .*ModelSpec"):
        ladder_precheck(arith[0], arith[0], tokenizer=tok, model=counted, work_dir=tmp_path)


def test_verdict_thresholds_and_unlearnable_data():
    from trainteam.trainers.search.ladder import ProxyRun, _judge

    ref = ProxyRun(name="reference", rows=100, heldout_loss=2.0, first_loss=5.0, last_loss=2.0, steps=10)

    def judge(heldout, first=5.0, last=2.0):
        run = ProxyRun(name="custom", rows=100, heldout_loss=heldout, first_loss=first, last_loss=last, steps=10)
        return _judge(run, ref, tolerance=0.05, heldout="eval_data", heldout_rows=10, proxy=TARGET)

    assert [judge(x).verdict for x in (1.8, 1.95, 2.09, 2.2)] == ["better", "comparable", "comparable", "worse"]
    flat = judge(1.5, first=5.0, last=4.95)  # a low held-out loss cannot rescue data the proxy did not learn
    assert flat.verdict == "unlearnable" and not flat.accept and "did not fall" in flat.reasons[-1]
