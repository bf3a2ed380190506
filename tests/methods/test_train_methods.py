"""Every method really trains a few steps on a tiny model and its loss moves."""

from __future__ import annotations

import json
import math

import pytest

from trainteam.core.errors import BadInput
from trainteam.trainers import EvalResult, TrainConfig, exact_match, load_model, train
from trainteam.trainers.training.config import DPOOptions, GRPOOptions, LoraOptions


def _cfg(tmp_path, **kw):
    base = dict(output_dir=tmp_path, max_steps=12, per_device_batch_size=16, learning_rate=3e-3, seq_len=64)
    base.update(kw)
    return TrainConfig(**base)


def _head_tail(losses, k=3):
    vals = [v for _, v in losses]
    return sum(vals[:k]) / k, sum(vals[-k:]) / k


def test_pretrain_packs_windows_and_learns(tmp_path, tiny, tok, arith):
    rep = train("pretrain", _cfg(tmp_path, save_steps=6), tiny, arith[0], tokenizer=tok, progress=False)
    assert rep.stopped_reason == "completed" and rep.steps_done == 12
    first, last = _head_tail(rep.losses)
    assert last < first - 0.5
    assert [p.name for p in rep.checkpoints] == ["checkpoint-6", "checkpoint-12"]
    assert (rep.final_dir / "model.safetensors").is_file() and (rep.final_dir / "tokenizer.json").is_file()
    # Every window is full: tokens counted = windows seen × seq_len, where an epoch's last
    # batch holds only the windows left over.
    from datasets import Dataset

    from trainteam.trainers.methods.pretrain import packed_windows

    n = len(packed_windows(tok, Dataset.from_list(arith[0]), 64))
    sizes = [min(16, n - i) for i in range(0, n, 16)]
    assert rep.telemetry["tokens"] == sum(sizes[s % len(sizes)] for s in range(12)) * 64
    for key in ("tokens_per_s", "goodput", "checkpoint_bytes_per_s", "mfu_estimate"):
        assert rep.telemetry[key] > 0, key
    assert 0 < rep.telemetry["goodput"] <= 1


def test_sft_learns_and_eval_uses_training_context(tmp_path, tiny, tok, arith):
    train_recs, ev = arith
    rep = train("sft", _cfg(tmp_path, max_steps=15), tiny, train_recs, tokenizer=tok, eval_data=ev, progress=False)
    first, last = _head_tail(rep.losses)
    assert last < first
    assert "eval_loss" in rep.metrics and math.isfinite(rep.metrics["eval_loss"])
    res = exact_match(rep.final_dir, tok, ev[:8], max_new_tokens=4)
    assert isinstance(res, EvalResult) and res.n == 8 and len(res.samples) == 8
    assert res.correct == sum(s["correct"] for s in res.samples)


def test_sft_from_jsonl_path(tmp_path, tiny, tok, arith):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in arith[0][:64]))
    rep = train("sft", _cfg(tmp_path / "out", max_steps=3), tiny, path, tokenizer=tok, progress=False)
    assert rep.steps_done == 3


def test_lora_adapter_saves_and_loads(tmp_path, tiny, tok, arith):
    cfg = _cfg(tmp_path, max_steps=10, lora=LoraOptions(r=4, alpha=8))
    rep = train("sft", cfg, tiny, arith[0], tokenizer=tok, progress=False)
    assert (rep.final_dir / "adapter_model.safetensors").is_file()
    assert not (rep.final_dir / "model.safetensors").exists()
    first, last = _head_tail(rep.losses)
    assert last < first
    loaded = load_model(rep.final_dir)
    assert hasattr(loaded, "peft_config")
    assert sum(p.numel() for n, p in loaded.named_parameters() if "lora_" in n) > 0
    # The loaded adapter reproduces the trained model's outputs.
    import torch

    ids = tok(["</s>12+34="], return_tensors="pt", add_special_tokens=False)["input_ids"]
    trained = load_model(rep.final_dir)
    with torch.no_grad():
        assert torch.allclose(loaded(ids).logits, trained(ids).logits)
    base_only = load_model(tmp_path / "base")
    with torch.no_grad():
        assert not torch.allclose(base_only(ids).logits, loaded(ids).logits)


def test_dpo_moves_the_preference(tmp_path, tiny, tok, arith):
    pairs = [
        {"prompt": r["prompt"], "chosen": r["completion"], "rejected": "9" + r["completion"][::-1]}
        for r in arith[0][:64]
    ]
    cfg = _cfg(tmp_path, max_steps=10, per_device_batch_size=8, learning_rate=3e-3, dpo=DPOOptions(beta=0.5))
    rep = train("dpo", cfg, tiny, pairs, tokenizer=tok, progress=False)
    assert rep.steps_done == 10
    assert rep.losses[0][1] == pytest.approx(math.log(2), abs=0.01)  # policy == reference at the start
    _, last = _head_tail(rep.losses, 3)
    assert last < math.log(2) - 0.1


def test_grpo_runs_with_verifiable_rewards(tmp_path, tiny, tok, arith):
    seen = []

    def spy(completions, answer, **_):
        seen.append(len(completions))
        return [float(c.strip() == a) for c, a in zip(completions, answer, strict=True)]

    cfg = _cfg(
        tmp_path,
        max_steps=2,
        per_device_batch_size=4,
        learning_rate=1e-4,
        grpo=GRPOOptions(num_generations=4, max_completion_length=4, loss_type="dapo", epsilon_high=0.28),
    )
    rep = train("grpo", cfg, tiny, arith[0][:16], tokenizer=tok, progress=False, reward_funcs=[spy])
    assert rep.steps_done == 2 and seen and all(n % 4 == 0 for n in seen)
    assert any("reward" in k for k in rep.metrics) or rep.losses


def test_bad_config_and_data_errors_name_the_field(tmp_path, tiny, tok, arith):
    with pytest.raises(BadInput, match="method"):
        train("rlhf", _cfg(tmp_path), tiny, arith[0], tokenizer=tok)
    with pytest.raises(BadInput, match="output_dir"):
        train("sft", TrainConfig(), tiny, arith[0], tokenizer=tok)
    with pytest.raises(BadInput, match=r"data: dpo needs fields \{prompt, chosen, rejected\}"):
        train("dpo", _cfg(tmp_path), tiny, arith[0], tokenizer=tok)
    with pytest.raises(BadInput, match="precision: fp16"):
        train("sft", _cfg(tmp_path, precision="fp16"), tiny, arith[0], tokenizer=tok)
    with pytest.raises(BadInput, match="quantize_4bit"):
        train("sft", _cfg(tmp_path, lora=LoraOptions(quantize_4bit=True)), tiny, arith[0], tokenizer=tok)
    import importlib.util

    if importlib.util.find_spec("liger_kernel") is None:
        with pytest.raises(BadInput, match="use_liger"):
            train("sft", _cfg(tmp_path, use_liger=True), tiny, arith[0], tokenizer=tok)
    with pytest.raises(BadInput, match=r"data\[1\]"):
        train("sft", _cfg(tmp_path), tiny, [arith[0][0], "oops"], tokenizer=tok)
    with pytest.raises(BadInput, match="x.csv: no such file"):
        train("sft", _cfg(tmp_path), tiny, tmp_path / "x.csv", tokenizer=tok)
    (tmp_path / "rows.yaml").write_text("a: 1\n")
    with pytest.raises(BadInput, match=r"unknown source type '\.yaml'"):
        train("sft", _cfg(tmp_path), tiny, tmp_path / "rows.yaml", tokenizer=tok)


def test_text_records_for_pretrain_and_sft(tmp_path, tiny, tok):
    texts = [{"text": f"the number {i} comes after {i - 1}."} for i in range(1, 200)]
    rep = train("pretrain", _cfg(tmp_path / "p", max_steps=3, seq_len=32), tiny, texts, tokenizer=tok, progress=False)
    assert rep.steps_done == 3 and rep.telemetry["tokens"] == 3 * 16 * 32
    rep = train("sft", _cfg(tmp_path / "s", max_steps=3), tiny, texts, tokenizer=tok, progress=False)
    assert rep.steps_done == 3 and all(math.isfinite(v) for _, v in rep.losses)


def test_lora_sft_then_lora_dpo_chains_through_the_adapter_folder(tmp_path, tiny, tok, arith):
    import torch

    sft = train(
        "sft", _cfg(tmp_path / "sft", max_steps=4, lora=LoraOptions(r=4)), tiny, arith[0], tokenizer=tok, progress=False
    )
    pairs = [
        {"prompt": r["prompt"], "chosen": r["completion"], "rejected": "9" + r["completion"][::-1]}
        for r in arith[0][:32]
    ]
    cfg = _cfg(
        tmp_path / "dpo",
        max_steps=4,
        per_device_batch_size=8,
        learning_rate=5e-3,
        lora=LoraOptions(r=4),
        dpo=DPOOptions(beta=0.5),
    )
    rep = train("dpo", cfg, sft.final_dir, pairs, tokenizer=tok, progress=False)
    # The reference is the SFT result (base + SFT adapter, merged): policy == reference at step 1.
    assert rep.losses[0][1] == pytest.approx(math.log(2), abs=0.01)
    assert (rep.final_dir / "adapter_model.safetensors").is_file()
    ids = tok(["<s>12+34="], return_tensors="pt", add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        sft_logits = load_model(sft.final_dir).merge_and_unload()(ids).logits
        dpo_base_logits = load_model(tmp_path / "dpo" / "base")(ids).logits
    assert torch.allclose(sft_logits, dpo_base_logits, atol=1e-5)


def test_added_functional_tokens_are_trainable(tmp_path, tiny, tok, arith):
    tok.add_special_tokens({"additional_special_tokens": ["<calc>"]})
    recs = [{"prompt": r["prompt"], "completion": "<calc>" + r["completion"]} for r in arith[0][:64]]
    rep = train("sft", _cfg(tmp_path, max_steps=2), tiny, recs, tokenizer=tok, progress=False)
    assert rep.steps_done == 2
    assert load_model(rep.final_dir).get_input_embeddings().weight.shape[0] >= len(tok)


def test_sft_layout_is_padding_free_unless_rows_need_truncating(tmp_path, tok, arith):
    from trainteam.trainers.methods.method_data import load_data
    from trainteam.trainers.methods.sft import sft_dataset, sft_layout

    ds = sft_dataset(tok, load_data(arith[0][:50], "sft"))
    short = sft_layout(_cfg(tmp_path, seq_len=64), tok, ds)
    assert short["padding_free"] and short["max_length"] is None and not short["packing"]
    tight = sft_layout(_cfg(tmp_path, seq_len=6), tok, ds)
    assert not tight["padding_free"] and tight["max_length"] == 6
    from trainteam.trainers.training.config import SFTOptions

    with pytest.raises(BadInput, match="sft.padding_free"):
        sft_layout(_cfg(tmp_path, seq_len=6, sft=SFTOptions(padding_free=True)), tok, ds)
    packed = sft_layout(_cfg(tmp_path, seq_len=64, sft=SFTOptions(packing=True)), tok, ds)
    assert packed["packing"] and packed["max_length"] == 64


def test_a_stage_never_resumes_another_stages_checkpoints(tmp_path, tiny, tok, arith):
    from datasets import Dataset

    cfg = _cfg(tmp_path, max_steps=2, save_steps=2)
    train("pretrain", cfg, tiny, Dataset.from_list(arith[0][:64]), tokenizer=tok, progress=False)
    with pytest.raises(BadInput, match="output_dir: .* holds a pretrain run"):
        train("sft", cfg, tiny, arith[0], tokenizer=tok, progress=False)


def test_padding_free_sft_trains_exactly_like_padded_rows(tmp_path, tok, arith):
    """Flattened rows must not attend to each other: same init, same data → same losses."""
    from trainteam.trainers import ModelSpec, build_model
    from trainteam.trainers.training.config import SFTOptions

    losses = {}
    for pf in (False, True):
        model = build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128), tok)
        cfg = _cfg(tmp_path / str(pf), max_steps=5, sft=SFTOptions(padding_free=pf))
        losses[pf] = [v for _, v in train("sft", cfg, model, arith[0], tokenizer=tok, progress=False).losses]
    assert losses[True] == pytest.approx(losses[False], rel=1e-4)


@pytest.mark.parametrize("padding_free", [False, True])
def test_sft_batches_are_padded_to_a_multiple_of_8_unless_the_trl_block_says(tmp_path, tiny, tok, arith, padding_free):
    """Batch widths come in steps of 8 (bounded kernel shapes on a CPU: trainers/methods/sft.py), padded and
    padding-free; a person's ``trl: {pad_to_multiple_of: ...}`` wins."""
    from trainteam.trainers.methods import sft
    from trainteam.trainers.methods.method_data import load_data
    from trainteam.trainers.training.config import SFTOptions

    rows = [{"prompt": "1+" * k + "1=", "completion": str(k + 1)} for k in range(1, 25)]  # 24 lengths
    ds = load_data(rows, "sft")
    for trl, multiple in (({}, 8), ({"pad_to_multiple_of": 16}, 16)):
        cfg = _cfg(
            tmp_path / str(multiple),
            sft=SFTOptions(padding_free=padding_free),
            trl=trl,
            seq_len=96,
            per_device_batch_size=3,
        )
        trainer = sft.build(cfg, tiny, tok, ds, None, tmp_path / str(multiple), [])
        widths = {batch["input_ids"].shape[1] for batch in trainer.get_train_dataloader()}
        assert widths and all(w % multiple == 0 for w in widths), widths
        real = {int((batch["labels"] != -100).sum()) for batch in trainer.get_train_dataloader()}
        assert min(real) > 0
