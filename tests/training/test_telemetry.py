"""MFU in the training telemetry counts what a step spends, over the peak the run trained on."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from trainteam.trainers import ModelSpec, TrainConfig, build_model, train
from trainteam.trainers.training import telemetry as T
from trainteam.trainers.training.config import LoraOptions

H, LAYERS, HEADS, KV_HEADS, INTER = 32, 2, 4, 2, 96


def _base_matmuls(model, spec: ModelSpec) -> int:
    """Matmul weights of a llama built from ``spec``, by hand: q, k, v, o, gate, up, down, lm_head."""
    h, i, head_dim = (
        spec.hidden_size,
        spec.intermediate_size or 4 * spec.hidden_size,
        spec.hidden_size // spec.num_heads,
    )
    kv = (spec.num_kv_heads or spec.num_heads) * head_dim
    vocab = model.get_input_embeddings().weight.shape[0]
    return spec.num_layers * (2 * h * h + 2 * h * kv + 3 * h * i) + vocab * h


def _lora_weights(spec: ModelSpec, r: int) -> int:
    """LoRA A and B weights on every linear of every layer (PEFT's all-linear leaves lm_head out)."""
    h, i = spec.hidden_size, spec.intermediate_size or 4 * spec.hidden_size
    kv = (spec.num_kv_heads or spec.num_heads) * (h // spec.num_heads)
    return spec.num_layers * r * (2 * (h + h) + 2 * (h + kv) + 3 * (h + i))


def test_flop_formula_full_lora_and_gpt2(tok):
    from peft import LoraConfig, get_peft_model

    spec = ModelSpec(
        hidden_size=H,
        num_layers=LAYERS,
        num_heads=HEADS,
        num_kv_heads=KV_HEADS,
        intermediate_size=INTER,
        max_position_embeddings=64,
    )
    model = build_model(spec, tok)
    n_base, attn = _base_matmuls(model, spec), LAYERS * H * 40
    full = T.flop_counts(model, 40)
    assert full["matmul_weights"] == full["trainable_matmul_weights"] == n_base
    assert full["forward"] == 2 * n_base + 4 * attn and full["total"] == 6 * n_base + 12 * attn
    assert T.flops_per_token(model, 40) == full["total"]

    lora = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules="all-linear", task_type="CAUSAL_LM"))
    n_lora = _lora_weights(spec, 4)
    counted = T.flop_counts(lora, 40)
    assert (counted["matmul_weights"], counted["trainable_matmul_weights"]) == (n_base + n_lora, n_lora)
    assert counted["total"] == 4 * n_base + 6 * n_lora + 12 * attn
    assert counted["forward"] == 2 * (n_base + n_lora) + 4 * attn  # the frozen base still runs forward

    # GPT-2 projections are HF Conv1D, not nn.Linear: they count too.
    gpt2 = build_model(
        ModelSpec(arch="gpt2", hidden_size=H, num_layers=1, num_heads=2, max_position_embeddings=64), tok
    )
    vocab = gpt2.get_input_embeddings().weight.shape[0]
    assert T.matmul_weights(gpt2) == (H * 3 * H + H * H + 2 * H * 4 * H + vocab * H,) * 2


def test_attention_context_is_the_token_weighted_sequence_length():
    from datasets import Dataset

    rows = Dataset.from_dict({"input_ids": [[1] * 4, [1] * 8, [1] * 100]})
    assert T.attention_context(rows, 16) == pytest.approx((16 + 64 + 256) / (4 + 8 + 16))  # 100 is cut to seq_len
    packed = Dataset.from_dict({"input_ids": [[1] * 8, [1] * 8], "seq_lengths": [[3, 5], [8]]})
    assert T.attention_context(packed, 16) == pytest.approx((9 + 25 + 64) / 16)
    pairs = Dataset.from_dict({"prompt_ids": [[1] * 3], "chosen_ids": [[1] * 2], "rejected_ids": [[1] * 5]})
    assert T.attention_context(pairs, 16) == pytest.approx((25 + 64) / 13)  # DPO runs prompt+chosen, prompt+rejected
    assert T.attention_context(Dataset.from_dict({"prompt": ["1+1="]}), 16) == 16.0
    assert T.attention_context(None, 16) == 16.0


def test_cpu_flops_per_cycle_from_flags():
    assert T.cpu_flops_per_cycle({"avx2", "fma", "avx512f"})[0] == 64
    assert T.cpu_flops_per_cycle({"avx2", "fma"})[0] == 32
    assert T.cpu_flops_per_cycle({"avx2"})[0] == 16 and T.cpu_flops_per_cycle(set())[0] == 16
    assert T.cpu_flops_per_cycle({"avx512f", "avx512_bf16"}, bf16=True)[0] == 128
    assert T.cpu_flops_per_cycle({"avx512f", "avx512_bf16"}, bf16=False)[0] == 64
    assert T.cpu_flops_per_cycle({"avx512f", "amx_bf16", "avx512_bf16"}, bf16=True)[0] == 1024


def test_peak_counts_the_threads_training_ran_with(tok, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the CPU peak is what is under test")
    monkeypatch.delenv("TRAINTEAM_PEAK_FLOPS", raising=False)
    model = build_model(ModelSpec(hidden_size=16, num_layers=1, num_heads=2, max_position_embeddings=32), tok)
    clock = SimpleNamespace(now=0.0)
    monkeypatch.setattr(T.time, "perf_counter", lambda: clock.now)
    tel = T.Telemetry(model, 32, wall_start=0.0)
    args, state = (
        SimpleNamespace(world_size=1, bf16=False),
        SimpleNamespace(num_input_tokens_seen=0, global_step=0, is_world_process_zero=True),
    )
    torch.set_num_threads(2)  # the count the run fixed when training started
    tel.on_train_begin(args, state, None, model=model)
    torch.set_num_threads(1)  # what the process uses after training is not what training ran on
    for seconds in (3.0, 1.0):
        tel.on_step_begin(args, state, None)
        clock.now += seconds
        state.num_input_tokens_seen += 1000
        state.global_step += 1
        tel.on_step_end(args, state, None)
    out = tel.summary(0)
    assert out["peak_threads"] == 2
    assert out["peak_flops"] == pytest.approx(T.device_peak_flops(2)[0])
    # More threads than physical cores share the cores' vector units: the peak stops growing.
    assert T.device_peak_flops(T.cpu_cores() + 7)[0] == T.device_peak_flops(T.cpu_cores())[0]
    # Ranks sum their tokens, so the peak is every rank's.
    tel.on_train_begin(SimpleNamespace(world_size=2, bf16=False), state, None, model=model)
    assert tel.summary(0)["peak_flops"] == pytest.approx(2 * T.device_peak_flops(1)[0])
    monkeypatch.setenv("TRAINTEAM_PEAK_FLOPS", "1e9")
    assert tel.summary(0)["peak_flops"] == 2e9
    idle = T.Telemetry(model, 32, wall_start=0.0)
    assert idle.summary(0)["mfu_estimate"] is None  # no tokens counted is no estimate, not 0


def _sft(tmp_path, tok, arith, lora):
    spec = ModelSpec(
        hidden_size=64,
        num_layers=LAYERS,
        num_heads=HEADS,
        num_kv_heads=KV_HEADS,
        intermediate_size=192,
        max_position_embeddings=128,
    )
    model = build_model(spec, tok)
    n_base = _base_matmuls(model, spec)
    cfg = TrainConfig(
        output_dir=tmp_path, max_steps=4, per_device_batch_size=16, learning_rate=3e-3, seq_len=64, lora=lora
    )
    return spec, n_base, train("sft", cfg, model, arith[0][:128], tokenizer=tok, progress=False).telemetry


def test_full_and_lora_sft_mfu_is_physical(tmp_path, tok, arith, monkeypatch):
    monkeypatch.delenv("TRAINTEAM_PEAK_FLOPS", raising=False)
    spec, n_base, full = _sft(tmp_path / "full", tok, arith, None)
    _, _, lora = _sft(tmp_path / "lora", tok, arith, LoraOptions(r=4, alpha=8))
    n_lora = _lora_weights(spec, 4)
    for tel in (full, lora):
        assert tel["tokens"] > 0 and 0 < tel["mfu_estimate"] <= 1, tel
    assert full["trainable_params"] == full["params"] and lora["trainable_params"] == n_lora
    assert lora["flops_per_token"] < full["flops_per_token"]
    assert full["flops_per_token"] == pytest.approx(6 * n_base, rel=0.04)
    assert lora["flops_per_token"] == pytest.approx(4 * n_base + 6 * n_lora, rel=0.04)
    # The rest is attention over the SFT rows' own length (BOS + text + EOS), not the 64-token seq_len.
    rows = [len(tok(r["prompt"] + r["completion"])["input_ids"]) for r in arith[0][:128]]
    for tel, matmuls in ((full, 6 * n_base), (lora, 4 * n_base + 6 * n_lora)):
        ctx = tel["flops"]["attention_context"]
        assert min(rows) <= ctx <= max(rows) + 2 < 64
        assert tel["flops_per_token"] == pytest.approx(matmuls + 12 * spec.num_layers * spec.hidden_size * ctx)
