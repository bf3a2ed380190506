"""Loss-spike monitor: an injected LR blow-up is caught within one log, a proposal rolls back."""

from __future__ import annotations

import math

import pytest
from transformers import TrainerCallback

from trainteam.trainers import ModelSpec, RestartProposal, TrainConfig, build_model, train
from trainteam.trainers.methods.method_registry import method_signals
from trainteam.trainers.training.config import SpikeOptions, SpikeSignal
from trainteam.trainers.training.spike import SpikeDetector, restart_refusal


class LrBlowUp(TrainerCallback):
    """One update at 1000× the learning rate: the next step's loss explodes."""

    def __init__(self, at: int):
        self.at = at

    def on_step_begin(self, args, state, control, optimizer=None, **kw):
        if state.global_step + 1 == self.at:
            for g in optimizer.param_groups:
                g["lr"] *= 1000


class NanWeights(TrainerCallback):
    def on_step_begin(self, args, state, control, model=None, **kw):
        if state.global_step + 1 == 3:
            import torch

            with torch.no_grad():
                next(model.parameters()).fill_(float("nan"))


def _cfg(out, **kw):
    return TrainConfig(
        output_dir=out,
        max_steps=30,
        per_device_batch_size=8,
        learning_rate=3e-3,
        seq_len=32,
        save_steps=4,
        save_total_limit=10,
        spike=SpikeOptions(window=8, warmup_steps=6, sigma=6),
        **kw,
    )


def _model(tok):
    return build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128), tok)


def _cosine(step, total=30, base=3e-3):
    return base * 0.5 * (1 + math.cos(math.pi * step / total))


def test_injected_spike_is_caught_and_approved_proposal_resumes_before_it(tmp_path, tok, arith):
    out = tmp_path / "run"
    rep = train(
        "pretrain", _cfg(out), _model(tok), arith[0], tokenizer=tok, callbacks=[LrBlowUp(at=14)], progress=False
    )
    # The update of step 14 is blown up; the loss of step 15 shows it, step 16 confirms it, and the
    # run stops there (a jump under 3 × sigma must persist for one more log).
    assert rep.stopped_reason == "spike" and rep.steps_done == 16
    assert rep.spike_evidence["confirmed_at"]["step"] == 16
    p = rep.proposal
    assert isinstance(p, RestartProposal)
    assert p.spike_step == 15 and p.rollback_checkpoint == out / "checkpoint-12"
    assert p.skip_batches == 3 and p.lr_scale == 0.5
    assert p.evidence["metric"] == "loss" and p.evidence["z"] > 6
    assert "loss spike" in p.reason
    assert rep.final_dir == out / "spike-16" and (rep.final_dir / "model.safetensors").is_file()
    assert not (out / "checkpoint-16").exists()  # evidence is kept aside, never auto-resumed
    lr10 = next(e["learning_rate"] for e in rep.log_history if e["step"] == 10)
    assert lr10 == pytest.approx(_cosine(9), rel=1e-4)  # the LR logged at step s drove update s

    # The person approves; training resumes from the pre-spike checkpoint, past the bad batches, at half LR.
    from trainteam.trainers.training.checkpoints import latest_complete

    again = train("pretrain", _cfg(out), _model(tok), arith[0], tokenizer=tok, apply_proposal=p, progress=False)
    assert again.stopped_reason == "completed" and again.steps_done == 30
    assert again.resumed_from.name == "rollback-15"
    assert again.losses[0][0] == 16
    # Had that restart died before its first save, "auto" would continue from the rollback.
    assert (out / "rollback-15" / ".ready").is_file()
    import shutil

    for c in ("checkpoint-16", "checkpoint-20", "checkpoint-24", "checkpoint-28", "checkpoint-30"):
        shutil.rmtree(out / c, ignore_errors=True)
    assert latest_complete(out) == out / "rollback-15"
    lr16 = next(e["learning_rate"] for e in again.log_history if e["step"] == 16)
    assert lr16 == pytest.approx(0.5 * _cosine(15), rel=1e-4)
    pre_spike = [v for s, v in rep.losses if s < 15]
    assert max(v for _, v in again.losses) < max(pre_spike)  # no second blow-up
    # The rollback copy never wrote through to the original checkpoint.
    import json

    assert json.loads((out / "checkpoint-12" / "trainer_state.json").read_text())["global_step"] == 12


def test_non_finite_loss_stops_even_in_warmup(tmp_path, tok, arith):
    rep = train(
        "pretrain", _cfg(tmp_path), _model(tok), arith[0], tokenizer=tok, callbacks=[NanWeights()], progress=False
    )
    assert rep.stopped_reason == "spike" and rep.steps_done == 3
    assert rep.proposal is None  # no checkpoint before step 3 to roll back to
    assert (tmp_path / "spike-3").is_dir()


def test_detector_rules():
    d = SpikeDetector(
        SpikeOptions(window=16, warmup_steps=8, sigma=6, watch_grad_norm=True),
        method_signals("sft", SpikeOptions(watch_grad_norm=True)),
    )
    vals = [2.0 + 0.01 * ((i * 7) % 5) for i in range(20)]
    assert all(d.observe(i, {"loss": v, "grad_norm": 1.0}) is None for i, v in enumerate(vals))
    assert d.observe(20, {"loss": 2.5, "grad_norm": 1.0})["metric"] == "loss"
    assert d.observe(21, {"loss": 2.01, "grad_norm": 50.0})["metric"] == "grad_norm"
    assert d.observe(22, {"loss": 2.02, "grad_norm": 1.0}) is None  # spikes never entered the window
    early = SpikeDetector(SpikeOptions(warmup_steps=64))
    assert early.observe(0, {"loss": 100.0}) is None  # warm-up: big values are fine...
    assert early.observe(1, {"loss": float("inf")})["rule"] == "non-finite"  # ...non-finite never is
    assert SpikeOptions().window == 128 and SpikeOptions().sigma == 6 and SpikeOptions().warmup_steps == 64
    loss_only = SpikeDetector(SpikeOptions(window=16, warmup_steps=0))  # grad-norm z-score off by default
    assert all(loss_only.observe(i, {"loss": 2.0 + 0.01 * (i % 3), "grad_norm": 1.0}) is None for i in range(10))
    assert loss_only.observe(10, {"loss": 2.0, "grad_norm": 50.0}) is None
    assert loss_only.observe(11, {"loss": 2.0, "grad_norm": float("nan")})["metric"] == "grad_norm"


# What GRPO logged on the demo's solved task (100 % exact match: every group's rewards equal,
# advantages 0): the surrogate loss sat at -0.001191 with no spread, then read -0.000893.
GRPO_FLAT = [-0.001191] * 70 + [-0.000893]


def test_a_near_constant_signal_never_makes_a_spike():
    opts = SpikeOptions(window=64, warmup_steps=8, signals=[SpikeSignal(metric="loss")])
    d = SpikeDetector(opts, opts.signals)
    assert all(d.observe(i, {"loss": v}) is None for i, v in enumerate(GRPO_FLAT))
    # The floored spread: the same jump is 0.015 spreads (it was z = 29,756 against the raw std).
    assert (GRPO_FLAT[-1] - GRPO_FLAT[0]) / d.spread(GRPO_FLAT[0], 0.0) < 1
    # A real jump still counts on a flat signal: the floor is a floor, not a blindfold.
    assert d.observe(71, {"loss": 0.5})["metric"] == "loss"


def test_one_noisy_value_is_not_a_spike_a_lasting_jump_is():
    d = SpikeDetector(SpikeOptions(window=16, warmup_steps=0), [SpikeSignal(metric="loss")])
    noise = [1.05 + 0.02 * ((i * 7) % 5 - 2) for i in range(16)]
    assert all(d.observe(i, {"loss": v}) is None for i, v in enumerate(noise))
    assert d.observe(16, {"loss": 1.30}) is None  # 7-8 spreads once (a small last batch of an epoch)...
    assert d.observe(17, {"loss": 1.05}) is None  # ...and gone: noise, and now part of the window
    assert d.observe(18, {"loss": 1.70}) is None  # a jump...
    ev = d.observe(19, {"loss": 1.65})  # ...that lasts
    assert ev["step"] == 18 and ev["value"] == 1.70 and ev["confirmed_at"]["step"] == 19
    d2 = SpikeDetector(SpikeOptions(window=16, warmup_steps=0), [SpikeSignal(metric="loss")])
    assert all(d2.observe(i, {"loss": v}) is None for i, v in enumerate(noise))
    assert d2.observe(16, {"loss": 9.0})["step"] == 16  # a huge jump counts at once


def test_each_method_watches_its_own_signal():
    assert [s.metric for s in method_signals("sft", SpikeOptions())] == ["loss"]
    assert [(s.metric, s.direction) for s in method_signals("grpo", SpikeOptions())] == [
        ("reward", "down"),
        ("kl", "up"),
    ]
    grpo = SpikeDetector(SpikeOptions(window=16, warmup_steps=4), method_signals("grpo", SpikeOptions()))
    for i, loss in enumerate(GRPO_FLAT[:30]):  # GRPO's surrogate loss is never its spike signal...
        assert grpo.observe(i, {"loss": loss * (1 + 300 * (i == 29)), "reward": 1.9 + 0.01 * (i % 2)}) is None
    ev = grpo.observe(30, {"loss": -0.0012, "reward": 0.2})  # ...a reward collapse is
    assert ev["metric"] == "reward" and ev["direction"] == "down" and ev["z"] > 6
    assert grpo.observe(31, {"loss": float("nan"), "reward": 1.9})["rule"] == "non-finite"  # non-finite: always


def test_no_restart_is_proposed_past_the_limit_or_for_the_same_spike_again():
    first = {"step": 86, "metric": "loss", "value": -0.000893}
    assert restart_refusal(first, [], max_restarts=2) is None
    # The approved restart reproduced the very same spike: another one would too.
    why = restart_refusal({**first, "value": -0.0008930001}, [first], max_restarts=2)
    assert why and "same spike" in why
    other = {"step": 90, "metric": "loss", "value": 3.0}
    assert restart_refusal(other, [first], max_restarts=2) is None
    assert "max_restarts 2" in restart_refusal(other, [first, {"step": 88, "metric": "loss", "value": 2.0}], 2)
    assert "max_restarts 0" in restart_refusal(first, [], max_restarts=0)
    assert restart_refusal(
        {"step": 5, "metric": "loss", "value": "nan"}, [{"step": 5, "metric": "loss", "value": "nan"}], 2
    )


class ForceLogs(TrainerCallback):
    """Overwrites logged values before the monitor reads them (added ahead of it)."""

    def __init__(self, fn):
        self.fn = fn

    def on_log(self, args, state, control, logs=None, **kw):
        if logs:
            logs.update(self.fn(state.global_step, logs))


def _grpo_cfg(out, **spike):
    from trainteam.trainers.training.config import GRPOOptions

    return TrainConfig(
        output_dir=out,
        max_steps=14,
        per_device_batch_size=4,
        learning_rate=1e-5,
        seq_len=32,
        save_steps=4,
        save_total_limit=10,
        grpo=GRPOOptions(num_generations=4, max_completion_length=3),
        spike=SpikeOptions(window=8, warmup_steps=4, **spike),
    )


def test_grpo_with_a_flat_loss_runs_to_the_end_and_a_reward_collapse_stops_it(tmp_path, tok, arith):
    exact = lambda completions, answer, **_: [float(c.strip() == a) for c, a in zip(completions, answer, strict=True)]  # noqa: E731
    flat = ForceLogs(lambda step, logs: {"loss": GRPO_FLAT[0] if step < 12 else GRPO_FLAT[-1]})
    rep = train(
        "grpo",
        _grpo_cfg(tmp_path / "flat"),
        _model(tok),
        arith[0][:64],
        tokenizer=tok,
        progress=False,
        reward_funcs=[exact],
        callbacks=[flat],
    )
    assert rep.stopped_reason == "completed" and rep.steps_done == 14
    # Even told to watch that loss, the floored spread sees no jump in it.
    rep = train(
        "grpo",
        _grpo_cfg(tmp_path / "flat-watched", signals=[SpikeSignal(metric="loss")]),
        _model(tok),
        arith[0][:64],
        tokenizer=tok,
        progress=False,
        reward_funcs=[exact],
        callbacks=[flat],
    )
    assert rep.stopped_reason == "completed" and rep.steps_done == 14

    collapse = ForceLogs(lambda step, logs: {"reward": 1.5 + 0.01 * (step % 2) if step < 11 else 0.0})
    rep = train(
        "grpo",
        _grpo_cfg(tmp_path / "collapse"),
        _model(tok),
        arith[0][:64],
        tokenizer=tok,
        progress=False,
        reward_funcs=[exact],
        callbacks=[collapse],
    )
    assert rep.stopped_reason == "spike" and rep.steps_done == 11
    assert rep.spike_evidence["metric"] == "reward" and rep.spike_evidence["direction"] == "down"
    assert rep.proposal is not None and rep.proposal.rollback_checkpoint.name == "checkpoint-8"
    assert "reward spike" in rep.proposal.reason


def test_proposal_never_rolls_back_to_a_checkpoint_that_may_hold_the_bad_update(tmp_path):
    import json

    from trainteam.trainers.training.spike import make_proposal

    for step in (8, 12):
        d = tmp_path / f"checkpoint-{step}"
        d.mkdir()
        (d / "trainer_state.json").write_text(json.dumps({"global_step": step}))
        (d / "model.safetensors").write_bytes(b"\x02" + bytes(7) + b"{}")  # a sound safetensors file of no tensors
    ev = {"step": 13, "metric": "loss", "value": 9.0, "rule": ">6σ"}
    p = make_proposal(ev, tmp_path)
    assert p.rollback_checkpoint.name == "checkpoint-8" and p.skip_batches == 5  # 12 saw update 12, shown at 13
    assert make_proposal({**ev, "step": 14}, tmp_path).rollback_checkpoint.name == "checkpoint-12"
    assert make_proposal({**ev, "step": 9}, tmp_path) is None
