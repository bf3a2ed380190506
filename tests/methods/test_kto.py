"""A method added as one file (trainers/methods/kto.py) and its name in trainers/training/method_names.py: KTO trains
through the same ``train()`` entry as every method, and the rest of the stack knows it from the registry."""

from __future__ import annotations

import math

import pytest
import torch

from trainteam.contract.search_spec import align_default_lr
from trainteam.core.errors import BadInput
from trainteam.trainers import TrainConfig, load_model, train
from trainteam.trainers.methods.method_data import load_data
from trainteam.trainers.methods.method_registry import align_methods, get_method


def _labelled(rows: list[dict]) -> list[dict]:
    """Desirable (the right sum) and undesirable (a wrong one) answers, alternating."""
    return [
        {
            "prompt": r["prompt"],
            "completion": r["completion"] if i % 2 == 0 else "9" + r["completion"][::-1],
            "label": i % 2 == 0,
        }
        for i, r in enumerate(rows)
    ]


def _cfg(tmp_path, **kw) -> TrainConfig:
    base = dict(output_dir=tmp_path, max_steps=8, per_device_train_batch_size=8, learning_rate=3e-3, max_length=64)
    return TrainConfig(**{**base, **kw})


def test_kto_learns_the_labels_and_saves_its_weights(tmp_path, tiny, tok, arith):
    before = {k: v.detach().clone() for k, v in tiny.state_dict().items()}
    cfg = _cfg(tmp_path, max_steps=10, trl={"beta": 0.5})  # KTO's own settings go in the trl: block
    rep = train("kto", cfg, tiny, _labelled(arith[0][:80]), tokenizer=tok, progress=False)

    assert rep.method == "kto" and rep.stopped_reason == "completed" and rep.steps_done == 10
    losses = [loss for _, loss in rep.losses]
    assert all(math.isfinite(loss) for loss in losses)
    assert losses[0] == pytest.approx(0.5, abs=0.01)  # policy == reference: KTO's sigmoid at a zero reward
    assert sum(losses[-3:]) / 3 < 0.45  # the desirable answers gained on the undesirable ones
    assert any("kl" in row for row in rep.log_history)  # KTO's KL estimate, logged by TRL's KTOTrainer
    assert (rep.final_dir / "model.safetensors").is_file() and (rep.final_dir / "tokenizer.json").is_file()
    saved = load_model(rep.final_dir).state_dict()
    assert any(not torch.equal(before[k], saved[k]) for k in before if k in saved)


def test_kto_takes_preference_pairs_too(tmp_path, tiny, tok, arith):
    pairs = [
        {"prompt": r["prompt"], "chosen": r["completion"], "rejected": "9" + r["completion"][::-1]}
        for r in arith[0][:32]
    ]
    rep = train("kto", _cfg(tmp_path, max_steps=2), tiny, pairs, tokenizer=tok, progress=False)
    assert rep.steps_done == 2 and all(math.isfinite(loss) for _, loss in rep.losses)


def test_the_stack_knows_kto_from_its_record(arith):
    assert TrainConfig(method="kto").method == "kto"
    assert "kto" in align_methods() and get_method("kto").config_class().__name__ == "KTOConfig"
    assert align_default_lr("kto", lora=False) == 1e-6  # an align stage that gives no rate trains at KTO's
    with pytest.raises(
        BadInput,
        match=r"kto needs fields \{prompt, completion, label\} or \{prompt, chosen, "
        r"rejected\}",
    ):
        load_data(arith[0][:4], "kto")
