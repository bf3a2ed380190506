"""The run planner: accounting checked by hand, refusals with reasons, strategy choice, no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from trainteam.core.errors import BadInput
from trainteam.trainers.planning import HardwareSpec, ModelShape, PlanRefused, plan, recommend
from trainteam.trainers.planning.estimate import CPU_BACKWARD_PEAK
from trainteam.trainers.planning.planner import padded_length
from trainteam.trainers.training.config import LoraOptions, ModelSpec, TrainConfig

GIB = 2**30
SPEC = ModelSpec(hidden_size=64, num_layers=2, num_heads=4, vocab_size=300, max_position_embeddings=512)
H100 = HardwareSpec(
    device="cuda",
    name="NVIDIA H100 80GB HBM3",
    devices_per_node=8,
    device_memory_gib=80,
    bf16=True,
    fabric="nvlink",
    price_per_device_hour=2.0,
)
CPU2 = HardwareSpec(device="cpu", devices_per_node=2, device_memory_gib=8)
CPU1 = HardwareSpec(device="cpu", devices_per_node=1, device_memory_gib=16)


def test_llama_parameter_count_by_hand_and_by_the_model_factory(tok_dir):
    # embed 300*64 + 2 layers * (4 attn 64x64 + 3 mlp 64x256 + 2 norms of 64) + final norm; head tied
    by_hand = 300 * 64 + 2 * (4 * 64 * 64 + 3 * 64 * 256 + 2 * 64) + 64
    assert ModelShape.from_spec(SPEC).num_params() == by_hand == 150_592
    from trainteam.trainers import build_model, load_tokenizer
    from trainteam.trainers.training.models import count_parameters

    tok = load_tokenizer(tok_dir)
    for spec in (
        SPEC.model_copy(update={"vocab_size": len(tok)}),
        SPEC.model_copy(update={"vocab_size": len(tok), "arch": "qwen2", "num_kv_heads": 2}),
        SPEC.model_copy(update={"vocab_size": len(tok), "arch": "gpt2"}),
    ):
        assert ModelShape.from_spec(spec).num_params() == count_parameters(build_model(spec, tok)), spec.arch


def test_batch_and_token_accounting_by_hand():
    hw = HardwareSpec(
        device="cuda",
        devices_per_node=4,
        nodes=2,
        device_memory_gib=80,
        bf16=True,
        fabric="infiniband",
        price_per_device_hour=3.0,
    )
    cfg = TrainConfig(
        per_device_batch_size=4,
        grad_accum=8,
        num_nodes=2,
        devices_per_node=4,
        seq_len=256,
        max_steps=500,
        precision="bf16",
        strategy="ddp",
    )
    p = plan(cfg, SPEC, hw, dataset_rows=64_000, tokens_per_second=10_000)
    assert p.world_size == 8 and p.data_parallel_size == 8
    assert p.global_batch_size == 4 * 8 * 8 == 256
    assert p.tokens_per_step == 256 * 256
    assert p.total_tokens == 256 * 256 * 500 == 32_768_000
    assert p.epochs == pytest.approx(256 * 500 / 64_000)
    # measured throughput given: 32.768M tokens / 10k tokens/s = 3276.8 s on 8 devices at 3.0 per device-hour
    assert p.cost.hours == pytest.approx(3276.8 / 3600)
    assert p.cost.device_hours == pytest.approx(8 * 3276.8 / 3600)
    assert p.cost.cost == pytest.approx(3.0 * 8 * 3276.8 / 3600)
    assert any("global batch 256" in r for r in p.reasons)


def test_sft_without_packing_counts_the_rows_tokens_not_seq_len_windows():
    cfg = TrainConfig(method="sft", per_device_batch_size=64, seq_len=64, max_steps=1500)
    full = plan(cfg, SPEC, CPU1, tokens_per_second=10_000)
    rows = plan(cfg, SPEC, CPU1, tokens_per_second=10_000, row_tokens=11.0)
    assert full.total_tokens == 64 * 64 * 1500
    assert rows.tokens_per_step == 64 * 11 and rows.total_tokens == 64 * 11 * 1500
    assert rows.cost.hours == pytest.approx(full.cost.hours * 11 / 64)
    assert any("rows of ~11.0 tokens" in r for r in rows.reasons)
    # rows longer than seq_len are cut to it; packing and pretraining fill whole windows
    assert plan(cfg, SPEC, CPU1, row_tokens=500.0).tokens_per_step == 64 * 64
    packed = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"packing": True})})
    assert plan(packed, SPEC, CPU1, row_tokens=11.0).tokens_per_step == 64 * 64
    pre = cfg.model_copy(update={"method": "pretrain"})
    assert plan(pre, SPEC, CPU1, row_tokens=11.0).tokens_per_step == 64 * 64


def test_row_token_bound_holds_for_the_trained_tokenizer(tok, arith, tmp_path):
    """The planner's bound (bytes + BOS + EOS) is never below what training really sees."""
    from trainteam.curation.formats import completion_text, prompt_text
    from trainteam.curation.jsonl import write_jsonl
    from trainteam.trainers.planning.tokens import file_row_tokens, row_tokens_bound

    train, _ = arith
    seen = [
        len(tok(prompt_text(tok, r["prompt"]) + completion_text(tok, r["completion"]))["input_ids"])
        for r in train[:1000]
    ]
    measured = sum(seen) / len(seen)
    bound = row_tokens_bound(train[:1000])
    assert measured <= bound < measured * 1.25
    write_jsonl(train[:1000], tmp_path / "sft.jsonl")
    assert file_row_tokens(tmp_path / "sft.jsonl", limit=1000) == pytest.approx(bound)
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    assert file_row_tokens(tmp_path / "bad.jsonl") is None and file_row_tokens(tmp_path / "missing.jsonl") is None


def test_tensor_parallel_shrinks_the_data_parallel_group():
    cfg = TrainConfig(
        per_device_batch_size=2,
        grad_accum=4,
        devices_per_node=8,
        precision="bf16",
        strategy="ddp",
        tensor_parallel_size=2,
    )
    p = plan(cfg, SPEC, H100)
    assert (p.data_parallel_size, p.global_batch_size) == (4, 2 * 4 * 4)


@pytest.mark.parametrize(
    "precision,strategy,dp,expect",
    [
        # 1e9 parameters, 16 bytes each (ZeRO paper): autocast keeps the model fp32, 4 + 4 + 8;
        # DeepSpeed keeps bf16 weights and grads and an fp32 master copy, 2 + 2 + 12
        ("fp32", "single", 1, (4e9, 4e9, 8e9)),
        ("bf16", "ddp", 8, (4e9, 4e9, 8e9)),
        ("bf16", "zero2", 8, (2e9, 2e9 / 8, 12e9 / 8)),
        ("bf16", "zero3", 8, (2e9 / 8, 2e9 / 8, 12e9 / 8)),
        ("bf16", "fsdp", 8, (4e9 / 8, 4e9 / 8, 8e9 / 8)),
    ],
)
def test_model_state_memory_by_precision_and_sharding(precision, strategy, dp, expect):
    hw = HardwareSpec(device="cuda", devices_per_node=dp, device_memory_gib=200, bf16=precision == "bf16")
    cfg = TrainConfig(precision=precision, strategy=strategy, devices_per_node=dp, per_device_batch_size=1, seq_len=128)
    m = plan(cfg, 1_000_000_000, hw, strict=False).memory
    assert (m.weights_gib, m.gradients_gib, m.optimizer_gib) == pytest.approx(tuple(x / GIB for x in expect))


def test_lora_trains_only_the_adapters():
    cfg = TrainConfig(precision="fp32", lora=LoraOptions(r=8), per_device_batch_size=1, seq_len=128)
    p = plan(cfg, SPEC, CPU1)
    per_layer = 8 * ((64 + 64) * 2 + (64 + 64) * 2 + (64 + 256) * 3)  # q, k, v, o, gate, up, down
    assert p.trainable_params == 2 * per_layer
    assert p.memory.gradients_gib == pytest.approx(2 * per_layer * 4 / GIB)
    assert p.memory.optimizer_gib == pytest.approx(2 * per_layer * 8 / GIB)


def test_activation_memory_by_hand_with_and_without_checkpointing():
    # A SwiGLU block saves 10h + 4I values per token (fp32: 4 bytes); the head keeps 3h values,
    # the fp32 logits and, when backward starts, their gradient. s=128, b=4, h=64, I=256, L=2, V=300.
    tokens = 128 * 4
    layer = tokens * (10 * 64 + 4 * 256) * 4
    head = tokens * (3 * 64 * 4 + 300 * 4) + tokens * 300 * 4
    # On a CPU a step's peak RSS holds 1.43x the saved tensors (measured: estimate.CPU_BACKWARD_PEAK).
    peak = CPU_BACKWARD_PEAK
    cfg = TrainConfig(per_device_batch_size=4, seq_len=128, max_steps=10)
    m = plan(cfg, SPEC, CPU1).memory
    assert m.activations_gib * GIB == pytest.approx(peak * (2 * layer + head))
    m_gc = plan(cfg.model_copy(update={"gradient_checkpointing": True}), SPEC, CPU1, strict=False).memory
    assert m_gc.activations_gib * GIB == pytest.approx(peak * (2 * tokens * 64 * 4 + layer + head))
    eager = plan(cfg.model_copy(update={"attn_implementation": "eager"}), SPEC, CPU1).memory
    assert eager.activations_gib * GIB == pytest.approx(peak * (2 * (layer + tokens * 4 * 128 * 4) + head))  # a*s
    on_gpu = plan(cfg.model_copy(update={"precision": "bf16"}), SPEC, H100.model_copy(update={"devices_per_node": 1}))
    assert on_gpu.memory.activations_gib * GIB == pytest.approx(
        2 * tokens * (10 * 64 + 4 * 256) * 2 + tokens * (3 * 64 * 2 + 300 * 6) + tokens * 300 * 4
    )  # bf16: 2-byte values, the logits upcast; no CPU factor


def test_an_unpacked_batch_is_sized_by_its_longest_row():
    """TRL pads an SFT micro-batch to its longest row: with every row counted, the activations are sized there, not
    at max_length; a packed window, or rows not all counted, stay at max_length."""
    cfg = TrainConfig(per_device_batch_size=4, seq_len=128, max_steps=10)
    full = plan(cfg, SPEC, CPU1).memory.activations_gib
    short = plan(cfg, SPEC, CPU1, longest_row=32).memory.activations_gib
    assert short == pytest.approx(full / 4)
    assert plan(cfg, SPEC, CPU1, longest_row=500).memory.activations_gib == pytest.approx(full)  # cut at max_length
    packed = cfg.model_copy(update={"sft": cfg.sft.model_copy(update={"packing": True})})
    assert plan(packed, SPEC, CPU1, longest_row=32).memory.activations_gib == pytest.approx(full)
    assert padded_length(cfg, None) == 128 and padded_length(cfg, 32) == 32


BIG = 7_000_000_000
V100 = HardwareSpec(device="cuda", name="Tesla V100", devices_per_node=1, device_memory_gib=32, bf16=False)
ETH = HardwareSpec(device="cuda", devices_per_node=8, nodes=2, device_memory_gib=80, bf16=True, fabric="ethernet")


@pytest.mark.parametrize(
    "kw,model,hw,field,kind,words",
    [
        (dict(precision="fp16"), SPEC, CPU1, "precision", "impossible", "CUDA"),
        (dict(precision="bf16"), SPEC, CPU1, "precision", "wasteful", "emulated"),
        (dict(precision="bf16"), SPEC, V100, "precision", "impossible", "no bf16"),
        (
            dict(precision="fp32"),
            SPEC,
            H100.model_copy(update={"devices_per_node": 1}),
            "precision",
            "wasteful",
            "bf16",
        ),
        (dict(lora=LoraOptions(quantize_4bit=True)), SPEC, CPU1, "lora.quantize_4bit", "impossible", "CUDA"),
        (dict(lora=LoraOptions()), SPEC, CPU1.model_copy(update={"bf16": True}), "precision", "wasteful", "bf16 base"),
        (dict(precision="bf16", strategy="fsdp", devices_per_node=8), SPEC, H100, "strategy", "wasteful", "fits one"),
        (dict(precision="bf16", strategy="zero3", devices_per_node=8), SPEC, H100, "strategy", "wasteful", "use ddp"),
        (dict(strategy="fsdp", devices_per_node=2), SPEC, CPU2, "strategy", "impossible", "falls back to DDP"),
        (dict(strategy="zero2", devices_per_node=2), SPEC, CPU2, "strategy", "impossible", "DeepSpeed"),
        (dict(precision="bf16", strategy="single", devices_per_node=8), SPEC, H100, "strategy", "wasteful", "idle"),
        (dict(strategy="ddp"), SPEC, CPU1, "strategy", "wasteful", "more than one"),
        (
            dict(precision="bf16", strategy="ddp", num_nodes=2, devices_per_node=8, tensor_parallel_size=16),
            SPEC,
            ETH,
            "tensor_parallel_size",
            "impossible",
            "spans nodes",
        ),
        (dict(devices_per_node=4, strategy="ddp"), SPEC, CPU2, "devices_per_node", "impossible", "has 2"),
        (
            dict(precision="bf16", per_device_batch_size=1, seq_len=2048),
            BIG,
            H100.model_copy(update={"devices_per_node": 1}),
            "strategy",
            "impossible",
            "GiB per device",
        ),
        # whole forwards asked for (a CPU would otherwise split this one: trainers/training/micro_batch.py)
        (
            dict(per_device_batch_size=4096, seq_len=512, micro_batch_tokens=4096 * 512),
            SPEC,
            CPU1,
            "per_device_train_batch_size",
            "impossible",
            "gradient_accumulation_steps",
        ),
        (dict(seq_len=1024), SPEC, CPU1, "max_length", "impossible", "max_position_embeddings"),
        (dict(attn_implementation="flash_attention_2"), SPEC, CPU1, "attn_implementation", "impossible", "CUDA"),
        (dict(use_liger=True), SPEC, CPU1, "use_liger_kernel", "impossible", "GPU"),
        (
            dict(gradient_checkpointing=True, per_device_batch_size=2),
            SPEC,
            CPU1,
            "gradient_checkpointing",
            "wasteful",
            "fits",
        ),
        (dict(warmup_steps=100, max_steps=100), SPEC, CPU1, "warmup_steps", "wasteful", "warm-up"),
    ],
)
def test_each_refusal_names_its_field_and_reason(kw, model, hw, field, kind, words):
    with pytest.raises(PlanRefused) as err:
        plan(TrainConfig(**kw), model, hw)
    hits = [r for r in err.value.refusals if r.field == field]
    assert hits, err.value.refusals
    assert hits[0].kind == kind and words in hits[0].reason
    assert isinstance(err.value, BadInput) and f"{field}: " in str(err.value)


def test_checkpointing_is_kept_under_a_persons_memory_budget():
    """Without a budget the planner drops checkpointing a run fits without (above); under budget.max_memory_gib
    it stays, because the estimate is a model (measured: 1.74 GiB estimated, 4.3 GiB peak for SmolLM2 LoRA SFT)."""
    cfg = TrainConfig(gradient_checkpointing=True, per_device_batch_size=2)
    with pytest.raises(PlanRefused):
        plan(cfg, SPEC, CPU1)
    budget = CPU1.model_copy(update={"device_memory_gib": 4.0, "memory_budget": True})
    kept = plan(cfg, SPEC, budget)
    assert kept.config.gradient_checkpointing and kept.memory.device_memory_gib == 4.0


def test_the_task_memory_budget_caps_the_machine_the_stages_are_planned_on():
    import yaml
    from spine_helpers import TINY_TASK

    from trainteam.contract.train_task import TrainTask
    from trainteam.workflows.task.stage_plan import task_machine, this_machine

    task = TrainTask.model_validate(yaml.safe_load(yaml.safe_dump(TINY_TASK)))
    assert task_machine(task) == this_machine() and not this_machine().memory_budget
    capped = task.model_copy(update={"budget": task.budget.model_copy(update={"max_memory_gib": 0.5})})
    hw = task_machine(capped)
    assert (hw.device_memory_gib, hw.memory_budget) == (0.5, True)
    with pytest.raises(ValidationError, match="max_memory_gib"):
        TrainTask.model_validate({**TINY_TASK, "budget": {**TINY_TASK["budget"], "max_memory_gib": -1}})


def test_every_problem_is_reported_at_once_and_wasteful_ones_can_be_waived():
    cfg = TrainConfig(precision="bf16", use_liger=True, warmup_steps=200, max_steps=100)
    with pytest.raises(PlanRefused) as err:
        plan(cfg, SPEC, CPU1)
    assert set(err.value.fields) == {"precision", "use_liger_kernel", "warmup_steps"}
    with pytest.raises(PlanRefused) as err:  # strict=False waives only the wasteful ones
        plan(cfg, SPEC, CPU1, strict=False)
    assert err.value.fields == ["use_liger_kernel"]
    p = plan(cfg.model_copy(update={"use_liger_kernel": False}), SPEC, CPU1, strict=False)
    assert {w.split(":")[0] for w in p.warnings} == {"precision", "warmup_steps"}


def test_recommend_chooses_strategy_by_model_size():
    base = TrainConfig(seq_len=2048, per_device_batch_size=8, grad_accum=32, max_steps=1000)
    small = recommend(125_000_000, H100, base=base, deepspeed_available=False)
    assert (small.config.strategy, small.config.precision) == ("ddp", "bf16")
    big = recommend(BIG, H100, base=base, deepspeed_available=False)
    assert big.config.strategy == "fsdp"
    mid = recommend(
        13_000_000_000,
        H100.model_copy(update={"nodes": 2, "fabric": "infiniband"}),
        base=base,
        deepspeed_available=True,
    )
    assert mid.config.strategy == "zero2"
    for p in (small, big, mid):
        c = p.config
        assert (
            c.per_device_train_batch_size * c.gradient_accumulation_steps * p.data_parallel_size
            == 256
            == p.global_batch_size
        )
        assert p.memory.fits and any(f"strategy {c.strategy}" in r for r in p.reasons)
    assert small.config.per_device_train_batch_size > big.config.per_device_train_batch_size
    with pytest.raises(PlanRefused) as err:
        recommend(70_000_000_000, H100, base=base, deepspeed_available=False)
    assert err.value.fields == ["model"] and "LoRA" in str(err.value)


def test_recommend_precision_and_cpu_choices():
    fp16 = recommend(SPEC, V100.model_copy(update={"devices_per_node": 2}))
    assert (fp16.config.precision, fp16.config.strategy) == ("fp16", "ddp")
    cpu = recommend(SPEC, CPU2, base=TrainConfig(attn_implementation="flash_attention_2", per_device_batch_size=16))
    assert (cpu.config.precision, cpu.config.strategy, cpu.config.attn_implementation) == ("fp32", "ddp", "sdpa")
    assert cpu.config.per_device_train_batch_size * cpu.config.gradient_accumulation_steps * 2 == 16


def test_adapters_on_a_cpu_with_native_bf16_train_on_a_bf16_base():
    """Measured on this machine's avx512_bf16 (docs/history.md): LoRA SFT of SmolLM2-135M on a bf16 base is
    faster and its peak RSS a quarter smaller; full fine-tuning and a CPU without native bf16 keep fp32."""
    bf16_cpu = CPU1.model_copy(update={"bf16": True})
    lora = recommend(SPEC, bf16_cpu, base=TrainConfig(lora=LoraOptions()))
    assert lora.config.precision == "bf16"
    assert any("a bf16 base, fp32 adapters" in r for r in lora.reasons), lora.reasons
    assert recommend(SPEC, bf16_cpu, base=TrainConfig()).config.precision == "fp32"  # full fine-tuning
    assert recommend(SPEC, CPU1, base=TrainConfig(lora=LoraOptions())).config.precision == "fp32"
    plan(TrainConfig(lora=LoraOptions(), precision="bf16"), SPEC, bf16_cpu)  # planned as asked: no refusal
    plan(TrainConfig(lora=LoraOptions()), SPEC, CPU1)  # fp32 where bf16 would be emulated: no refusal
    halves = plan(TrainConfig(lora=LoraOptions(), precision="bf16"), SPEC, bf16_cpu).memory
    whole = plan(TrainConfig(lora=LoraOptions()), SPEC, bf16_cpu, strict=False).memory
    assert whole.weights_gib - halves.weights_gib == pytest.approx(
        150_592 * 2 / GIB, rel=0.01
    )  # 2 bytes a frozen weight


def test_bad_inputs_name_the_field():
    with pytest.raises(ValidationError, match="fabric"):
        HardwareSpec(device="cuda", nodes=2)
    with pytest.raises(ValidationError, match="tensor_parallel_size"):
        TrainConfig(tensor_parallel_size=0)
    with pytest.raises(BadInput, match="^model: "):
        plan(TrainConfig(), -5, CPU1)
    with pytest.raises(BadInput, match="model.vocab_size"):
        plan(TrainConfig(), ModelSpec(), CPU1)
    with pytest.raises(BadInput, match="model.path"):
        plan(TrainConfig(), ModelSpec(path="/nonexistent/model"), CPU1)
    with pytest.raises(BadInput, match="global_batch_size"):
        recommend(SPEC, H100, global_batch_size=4)


def test_plan_reads_a_local_model_folder(tmp_path):
    (tmp_path / "config.json").write_text(
        '{"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, '
        '"intermediate_size": 256, "vocab_size": 300, "tie_word_embeddings": false}'
    )
    p = plan(TrainConfig(), ModelSpec(path=tmp_path), CPU1)
    assert p.params == 150_592 + 300 * 64  # untied head


def test_plan_imports_no_torch_and_detects_this_machine():
    code = (
        "import sys\n"
        "from trainteam.trainers.training.config import TrainConfig\n"
        "from trainteam.trainers.planning import detect_hardware, plan\n"
        "hw = detect_hardware()\n"
        "p = plan(TrainConfig(max_steps=10))\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
        "print(hw.device, hw.device_memory_gib > 0, p.total_tokens)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    device, mem_ok, tokens = out.stdout.split()
    assert device in ("cpu", "cuda") and mem_ok == "True" and int(tokens) == 10 * 8 * 128


def test_dpo_reference_model_is_counted_unless_precomputed_or_peft():
    cfg = TrainConfig(method="dpo", per_device_batch_size=1, seq_len=128)
    n = 150_592
    with_ref = plan(cfg, SPEC, CPU1).memory.weights_gib * GIB
    assert with_ref == pytest.approx(2 * n * 4)  # policy + frozen reference, fp32
    pre = TrainConfig(method="dpo", per_device_batch_size=1, seq_len=128, dpo={"precompute_ref_log_probs": True})
    assert plan(pre, SPEC, CPU1).memory.weights_gib * GIB == pytest.approx(n * 4)
