"""The precision a checkpoint is scored at (``eval.precision``, trainers/evaluation/precision.py): fp32 unless the
task says bf16; an adapter checkpoint and the weights merged from it are scored on the same numbers, so the judge's
measurements before and after the merge agree; the battery says which precision it scored at."""

from __future__ import annotations

import pytest
from model_fixtures import make_model, make_tokenizer, train_steps
from persona_helpers import TASK

from trainteam.contract.train_task import TrainTask
from trainteam.trainers.evaluation.battery import BatterySpec, run_battery
from trainteam.trainers.evaluation.precision import load_for_eval
from trainteam.workflows.task.curriculum import eval_settings


def test_the_task_names_the_precision_and_refuses_another():
    assert eval_settings(TrainTask.model_validate(TASK))["precision"] == "fp32"
    task = TrainTask.model_validate({**TASK, "eval": {"precision": "bf16"}})
    assert BatterySpec.model_validate({"metrics": ["heldout_loss"], **eval_settings(task)}).precision == "bf16"
    with pytest.raises(ValueError, match="precision"):
        TrainTask.model_validate({**TASK, "eval": {"precision": "fp16"}})


@pytest.fixture(scope="module")
def adapter_and_merged(tmp_path_factory, addition_data):
    """A base (hidden 256), LoRA adapters trained on it a few steps, and the weights
    merged from them (PEFT's merge, saved as a training run saves them)."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.set_num_threads(1)
    train, _ = addition_data
    root = tmp_path_factory.mktemp("precision")
    tok = make_tokenizer([r["prompt"] + r["completion"] for r in train])
    base = make_model(tok, hidden=256)
    base.save_pretrained(root / "base", safe_serialization=True)
    tok.save_pretrained(root / "base")
    base = type(base).from_pretrained(root / "base")  # the adapter names its base folder
    peft_model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    train_steps(peft_model, tok, train, steps=6, batch=8)
    peft_model.save_pretrained(root / "adapter")
    tok.save_pretrained(root / "adapter")
    merged = peft_model.merge_and_unload()
    merged.save_pretrained(root / "merged", safe_serialization=True)
    tok.save_pretrained(root / "merged")
    return root, tok


def test_adapters_and_their_merge_are_scored_on_the_same_numbers(adapter_and_merged):
    import torch

    root, tok = adapter_and_merged
    ids = tok(["1+2=", "7+5="], return_tensors="pt", padding=True)
    logits = {}
    for name in ("adapter", "merged"):
        model = load_for_eval(root / name, "bf16")
        assert model.dtype == torch.bfloat16
        assert not hasattr(model, "peft_config"), "an adapter checkpoint is merged before it is scored"
        with torch.no_grad():
            logits[name] = model(**ids).logits
    assert torch.equal(logits["adapter"], logits["merged"])
    fp32 = load_for_eval(root / "merged", "fp32")
    assert fp32.dtype == torch.float32
    with torch.no_grad():
        full = fp32(**ids).logits
    with torch.no_grad():
        assert not torch.allclose(load_for_eval(root / "base", "fp32")(**ids).logits, full), "the adapters learnt"
    assert not torch.equal(full, logits["merged"].float())  # bf16 is a different number, close to it
    assert torch.allclose(full, logits["merged"].float(), atol=0.1)


def test_the_battery_says_the_precision_it_scored_at(adapter_and_merged, addition_data):
    root, _ = adapter_and_merged
    _, held = addition_data
    for precision in ("fp32", "bf16"):
        spec = BatterySpec(metrics=["heldout_loss", "exact_match"], max_new_tokens=4, precision=precision)
        result = run_battery(root / "adapter", root / "adapter", held[:6], stage="post_train", spec=spec)
        assert result.details["precision"] == precision
        assert result.metrics["heldout_loss"] > 0
