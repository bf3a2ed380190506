"""``plan()`` checks a config against the hardware; ``recommend()`` chooses one. No torch.

A plan is the contract the training engineer shows a person before a run spends money: how
many tokens, how much memory per device, how long, what it costs, and why each setting is
what it is. Settings that cannot work are refused (``kind="impossible"``); settings that work
but waste the hardware are refused too (``kind="wasteful"``) unless ``strict=False``, in which
case they become warnings a person sees.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from trainteam.core.errors import BadInput
from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.planning.estimate import (
    GIB,
    MemoryEstimate,
    ModelShape,
    memory_estimate,
    state_bytes_per_param,
    train_flops_per_token,
)
from trainteam.trainers.planning.hardware import HardwareSpec, detect_hardware
from trainteam.trainers.training.config import ModelSpec, TokenizerConfig, TrainConfig
from trainteam.trainers.training.micro_batch import forward_rows, token_budget

FITS_MANY_TIMES = 4  # a replica this many times smaller than a device does not need sharding


class Refusal(BaseModel):
    field: str
    reason: str
    kind: Literal["impossible", "wasteful"]

    def __str__(self) -> str:
        return f"{self.field}: {self.reason}"


class PlanRefused(BadInput):
    """The config cannot run, or would waste the hardware; each refusal names its field."""

    def __init__(self, refusals: list[Refusal]):
        self.refusals = refusals
        super().__init__("; ".join(str(r) for r in refusals))

    @property
    def fields(self) -> list[str]:
        return [r.field for r in self.refusals]


class CostEstimate(BaseModel):
    flops: float
    tokens_per_second: float = Field(description="whole job; from peak FLOP/s x assumed MFU unless measured")
    throughput_source: Literal["assumed", "measured"] = Field(
        default="assumed", description="measured: given by the caller (a calibration on this machine)"
    )
    hours: float
    device_hours: float
    price_per_device_hour: float
    cost: float


class RunPlan(BaseModel):
    config: TrainConfig
    hardware: HardwareSpec
    model_arch: str = "llama"
    model: ModelSpec | None = Field(default=None, description="the planned model, when given as a spec")
    params: int
    trainable_params: int
    world_size: int
    data_parallel_size: int
    tensor_parallel_size: int
    global_batch_size: int
    max_steps: int = Field(description="the config's max_steps, or what num_train_epochs makes of the data's rows")
    tokens_per_step: int
    total_tokens: int
    epochs: float | None = None
    memory: MemoryEstimate
    cost: CostEstimate
    reasons: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    def summary(self) -> str:
        """A few lines a person reads before approving the run."""
        c, hw = self.config, self.hardware
        head = (
            f"{self.params:,} parameters ({self.trainable_params:,} trained) on {hw.nodes} x {hw.devices_per_node} "
            f"{hw.device}{' ' + hw.name if hw.name else ''}: {c.strategy}, {c.precision}, micro-batch "
            f"{c.per_device_train_batch_size} x accumulation {c.gradient_accumulation_steps}"
            + (", gradient checkpointing" if c.gradient_checkpointing else "")
        )
        lines = [head] + [f"  - {r}" for r in self.reasons] + [f"  ! {w}" for w in self.warnings]
        return "\n".join(lines)


def model_shape(model: ModelSpec | ModelShape | int, vocab_size: int | None = None) -> tuple[ModelShape, list[str]]:
    """A shape for estimates. A bare parameter count gets a Llama-like shape (hidden/layers = 128)."""
    if isinstance(model, ModelShape):
        return model, []
    if isinstance(model, ModelSpec):
        return ModelShape.from_spec(model, vocab_size=vocab_size), []
    if isinstance(model, bool) or not isinstance(model, int) or model <= 0:
        raise BadInput(f"model: expected a ModelSpec or a positive parameter count, got {model!r}")
    vocab = vocab_size or 32000
    # 16 h^2 parameters per Llama block with a 4h MLP, L = h / 128 layers  =>  N ~ h^3 / 8
    h = max(64, int(round((8 * model) ** (1 / 3) / 64)) * 64)
    layers = max(1, round(h / 128))
    shape = ModelShape(
        hidden_size=h,
        num_layers=layers,
        num_heads=max(1, h // 64),
        num_kv_heads=max(1, h // 64),
        intermediate_size=4 * h,
        vocab_size=vocab,
        max_position_embeddings=4096,
    )
    note = f"model: {model:,} parameters given as a number; activations estimated for hidden {h} x {layers} layers"
    return shape, [note]


def _scaled_shape(shape: ModelShape, params: int) -> ModelShape:
    """Keep the shape for activations but make the state estimate use the given count."""
    return _Fixed(**shape.model_dump(), fixed_params=params)


class _Fixed(ModelShape):
    fixed_params: int

    def num_params(self) -> int:
        return self.fixed_params


def _memory(
    cfg: TrainConfig,
    shape: ModelShape,
    hw: HardwareSpec,
    *,
    strategy: str | None = None,
    micro_batch: int | None = None,
    gc: bool | None = None,
    seq_len: int | None = None,
) -> MemoryEstimate:
    """The memory ``cfg`` needs per device; a micro-batch padded to ``seq_len`` tokens (default: max_length)."""
    world = cfg.num_nodes * cfg.devices_per_node
    tp = cfg.tensor_parallel_size
    mem = memory_estimate(
        shape,
        precision=cfg.precision,
        strategy=strategy or cfg.strategy,
        dp_size=max(1, world // tp),
        tp_size=tp,
        micro_batch=micro_batch or forward_batch(cfg, shape, hw, seq_len or cfg.max_length)[0],
        seq_len=seq_len or cfg.max_length,
        gradient_checkpointing=cfg.gradient_checkpointing if gc is None else gc,
        attn_implementation=cfg.attn_implementation,
        lora_r=cfg.lora.r if cfg.lora else None,
        quantize_4bit=bool(cfg.lora and cfg.lora.quantize_4bit),
        device_memory_gib=hw.device_memory_gib,
        cuda=hw.device == "cuda",
    )
    ref = _reference_model_bytes(cfg, shape, strategy or cfg.strategy, max(1, world // tp)) / tp
    if ref:
        mem = mem.model_copy(
            update={"weights_gib": mem.weights_gib + ref / GIB, "total_gib": mem.total_gib + ref / GIB}
        )
    return mem


def _reference_model_bytes(cfg: TrainConfig, shape: ModelShape, strategy: str, dp: int) -> float:
    """DPO (unless log-probs are precomputed) and GRPO with a KL term hold a frozen reference copy."""
    needs = get_method(cfg.method).holds_reference(cfg)
    if not needs or cfg.lora is not None:  # with PEFT the reference is the base with adapters disabled
        return 0.0
    b = shape.num_params() * state_bytes_per_param(cfg.precision, strategy)[0]
    return b / dp if strategy in ("zero3", "fsdp") else b


def planned_steps(cfg: TrainConfig, dataset_rows: int | None, data_parallel: int = 1) -> int:
    """Optimizer steps: ``max_steps``, or with ``num_train_epochs`` what transformers' Trainer derives
    (batches per epoch per rank over the accumulation, rounded up, times the epochs, rounded up)."""
    if cfg.num_train_epochs is None:
        return cfg.max_steps
    if not dataset_rows:
        raise BadInput("num_train_epochs: the planner needs the data's row count to turn epochs into steps")
    batches = math.ceil(math.ceil(dataset_rows / data_parallel) / cfg.per_device_train_batch_size)
    per_epoch = max(1, math.ceil(batches / cfg.gradient_accumulation_steps))
    return max(1, math.ceil(cfg.num_train_epochs * per_epoch))


def check(
    cfg: TrainConfig, shape: ModelShape, hw: HardwareSpec, steps: int | None = None, seq_len: int | None = None
) -> list[Refusal]:
    """Every refusal for this config on this hardware (empty: it may run); ``steps`` default max_steps; ``seq_len``
    the tokens a micro-batch pads to (``padded_length``; default max_length)."""
    out: list[Refusal] = []
    steps = steps or cfg.max_steps

    def no(field: str, reason: str, kind: Literal["impossible", "wasteful"] = "impossible") -> None:
        out.append(Refusal(field=field, reason=reason, kind=kind))

    _device_refusals(cfg, shape, hw, steps, no)
    _parallel_refusals(cfg, shape, hw, no)
    _memory_refusals(cfg, shape, hw, no, seq_len)
    return out


Refuse = Callable[..., None]


def _device_refusals(cfg: TrainConfig, shape: ModelShape, hw: HardwareSpec, steps: int, no: Refuse) -> None:
    """What this hardware cannot run (or runs wastefully): nodes, devices, precision, kernels, the window."""
    cpu = hw.device == "cpu"
    if cfg.num_nodes > hw.nodes:
        no("num_nodes", f"{cfg.num_nodes} nodes asked, the hardware has {hw.nodes}")
    if cfg.devices_per_node > hw.devices_per_node:
        no("devices_per_node", f"{cfg.devices_per_node} devices per node asked, the hardware has {hw.devices_per_node}")
    if cfg.precision == "fp16" and cpu:
        no("precision", "fp16 mixed precision needs a CUDA device; on a CPU use fp32 (or bf16 on a bf16 CPU)")
    if cfg.precision == "bf16" and not hw.bf16:
        if cpu:
            no("precision", "bf16 on a CPU without native bf16 is emulated, 6-8x slower than fp32", "wasteful")
        else:
            no("precision", f"{hw.name or 'this GPU'} has no bf16; use fp16")
    if cfg.precision == "fp32" and hw.device == "cuda" and hw.bf16:
        no(
            "precision",
            "fp32 on a bf16-capable GPU doubles activation memory and forgoes tensor-core speed; use bf16",
            "wasteful",
        )
    if cfg.precision == "fp32" and cpu and hw.bf16 and _adapters_only(cfg):
        no(
            "precision",
            "fp32 adapter training on a CPU with native bf16 keeps the frozen weights at twice the memory and "
            "runs its matmuls slower; use bf16 (a bf16 base, fp32 adapters)",
            "wasteful",
        )
    if cfg.lora and cfg.lora.quantize_4bit and hw.device != "cuda":
        no("lora.quantize_4bit", "QLoRA (4-bit bitsandbytes) needs a CUDA device")
    if cfg.attn_implementation == "flash_attention_2" and cpu:
        no("attn_implementation", "flash_attention_2 needs a CUDA device; use sdpa")
    if cfg.use_liger_kernel and cpu:
        no("use_liger_kernel", "Liger kernels are Triton kernels and need a GPU")
    if cfg.max_length > shape.max_position_embeddings:
        no(
            "max_length",
            f"{cfg.max_length} exceeds the model's max_position_embeddings {shape.max_position_embeddings}",
        )
    if cfg.warmup_steps >= steps:
        no("warmup_steps", f"{cfg.warmup_steps} >= max_steps {steps}: the LR never leaves warm-up", "wasteful")


def _parallel_refusals(cfg: TrainConfig, shape: ModelShape, hw: HardwareSpec, no: Refuse) -> None:
    """Tensor parallelism and the distribution strategy against the devices and the model."""
    cpu = hw.device == "cpu"
    world = cfg.num_nodes * cfg.devices_per_node
    tp = cfg.tensor_parallel_size
    if world % tp:
        no("tensor_parallel_size", f"{tp} does not divide the {world} devices")
    if tp > 1:
        if cpu:
            no("tensor_parallel_size", "tensor parallelism needs CUDA devices")
        if tp > cfg.devices_per_node and not hw.fast_fabric:
            no(
                "tensor_parallel_size",
                f"tensor parallel over {tp} devices spans nodes; {hw.fabric} is too slow "
                "for per-layer all-reduces (needs infiniband or nvlink)",
            )
        if shape.num_heads % tp:
            no("tensor_parallel_size", f"{tp} does not divide the model's {shape.num_heads} attention heads")
    if cfg.strategy == "single" and world > 1:
        no("strategy", f"single with {world} devices leaves {world - 1} idle; use ddp", "wasteful")
    if cfg.strategy != "single" and world == 1:
        no("strategy", f"{cfg.strategy} needs more than one device/process; use single", "wasteful")
    if cfg.strategy == "fsdp" and cpu:
        no("strategy", "FSDP through Trainer/accelerate silently falls back to DDP on a CPU; use ddp")
    if cfg.strategy in ("zero2", "zero3") and cpu:
        no("strategy", "DeepSpeed ZeRO needs CUDA devices; use ddp on a CPU")
    if cfg.strategy in ("fsdp", "zero2", "zero3") and world > 1:
        replica = _memory(cfg, shape, hw, strategy="ddp")
        if replica.total_gib * FITS_MANY_TIMES <= hw.device_memory_gib:
            no(
                "strategy",
                f"{cfg.strategy} shards a model whose whole training state ({replica.total_gib:.2f} GiB) "
                f"fits one device ({hw.device_memory_gib:g} GiB) {hw.device_memory_gib / replica.total_gib:.0f}x over; "
                "use ddp (no all-gathers)",
                "wasteful",
            )


def _memory_refusals(cfg: TrainConfig, shape: ModelShape, hw: HardwareSpec, no: Refuse, seq_len: int | None) -> None:
    """Whether the training state fits a device, and whether checkpointing buys memory the run needs."""
    mem = _memory(cfg, shape, hw, seq_len=seq_len)
    if not mem.fits:
        one = _memory(cfg, shape, hw, micro_batch=1, seq_len=seq_len)
        field = "per_device_train_batch_size" if one.fits else "strategy"
        hint = (
            "lower the micro-batch and raise gradient_accumulation_steps"
            if one.fits
            else "shard (fsdp / zero3), use LoRA, or turn on gradient_checkpointing"
        )
        no(
            field,
            f"needs {mem.total_gib:.2f} GiB per device, {hw.device_memory_gib:g} GiB available "
            f"(x{mem.headroom} headroom); {hint}",
        )
    elif cfg.gradient_checkpointing and not hw.memory_budget:
        # under a person's memory budget checkpointing is theirs to keep: the estimate is a model (measured for
        # LoRA SFT of SmolLM2-135M in bf16 on a CPU, 1,024 tokens: 1.74 GiB estimated without it, 4.3 GiB peak RSS)
        without = _memory(cfg, shape, hw, gc=False, seq_len=seq_len)
        if without.total_gib * 2 <= hw.device_memory_gib * without.headroom:
            no(
                "gradient_checkpointing",
                f"the run fits in {without.total_gib:.2f} GiB without it; recomputation costs a third more compute",
                "wasteful",
            )


def forward_batch(cfg: TrainConfig, shape: ModelShape, hw: HardwareSpec, seq_len: int) -> tuple[int, int | None]:
    """``(rows one forward holds, the token bound that set it)``: the micro-batch as the trainer runs it
    (``micro_batch.forward_rows``; a CPU bounds a forward's activations), the bound None where none applies."""
    budget = token_budget(cfg.micro_batch_tokens, hw.device == "cuda", shape.num_layers * shape.hidden_size)
    sequences = get_method(cfg.method).sequences_per_row
    rows, _ = forward_rows(cfg.per_device_train_batch_size, 1, seq_len, sequences, budget)
    return rows, (budget if sequences is not None else None)


def _forward_reasons(cfg: TrainConfig, shape: ModelShape, hw: HardwareSpec, seq_len: int) -> list[str]:
    """The split of a micro-batch into forwards, where there is one."""
    held, bound = forward_batch(cfg, shape, hw, seq_len)
    if held == cfg.per_device_train_batch_size:
        return []
    return [
        f"a forward holds {held} of the {cfg.per_device_train_batch_size} rows ({held} x {seq_len} tokens, at most "
        f"{bound} on a {hw.device}: micro_batch_tokens); the others accumulate into the same optimizer step"
    ]


def plan(
    cfg: TrainConfig,
    model: ModelSpec | ModelShape | int | None = None,
    hardware: HardwareSpec | None = None,
    *,
    vocab_size: int | None = None,
    dataset_rows: int | None = None,
    tokens_per_second: float | None = None,
    row_tokens: float | None = None,
    row_tokens_note: str | None = None,
    throughput_note: str | None = None,
    longest_row: int | None = None,
    strict: bool = True,
) -> RunPlan:
    """Account for a config on the hardware, or raise ``PlanRefused`` naming the fields.

    ``row_tokens`` (the data's mean tokens per training example: counted with the model's tokenizer,
    ``tokens.count_tokens``, or an upper bound) makes an SFT run without packing count what it computes: each row's
    own tokens, not ``seq_len`` of padding (the demo's 11-token rows at seq_len 64 were estimated 5.9x too many
    tokens); for DPO it is the chosen and the rejected sequence together. ``dataset_rows`` (training examples) turns
    ``num_train_epochs`` into steps and reports the epochs. ``row_tokens_note`` and ``throughput_note`` say in the
    reasons where those numbers came from. ``longest_row`` (every row counted) sizes an unpacked SFT micro-batch's
    activations (``padded_length``).

    ``model=None`` is ``ModelSpec()`` with the default tokenizer's vocabulary; ``hardware=None`` reads this machine
    (torch is imported only if a GPU may be present). ``tokens_per_second`` (measured, whole job: ``calibrate``)
    replaces the FLOP-based throughput guess.
    """
    if model is None:
        model = ModelSpec(vocab_size=TokenizerConfig().vocab_size)
    if hardware is None:
        hardware = detect_hardware(processes=cfg.devices_per_node)
    shape, notes = model_shape(model, vocab_size)
    if isinstance(model, int):
        shape = _scaled_shape(shape, model)
    world, tp = cfg.num_nodes * cfg.devices_per_node, cfg.tensor_parallel_size
    dp = max(1, world // tp)
    steps, seq_len = planned_steps(cfg, dataset_rows, dp), padded_length(cfg, longest_row)
    refusals = check(cfg, shape, hardware, steps, seq_len)
    blocking = [r for r in refusals if strict or r.kind == "impossible"]
    if blocking:
        raise PlanRefused(blocking)
    warnings = [str(r) for r in refusals if r not in blocking]

    gbs = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps * dp
    window, per_row = _row_window(cfg, row_tokens)
    tokens_step = int(round(gbs * per_row))
    total = tokens_step * steps
    mem = _memory(cfg, shape, hardware, seq_len=seq_len)
    n = shape.num_params()
    trainable = shape.lora_params(cfg.lora.r) if cfg.lora else n
    cost = _cost(cfg, shape, hardware, world, total, tokens_per_second)
    of_rows = f" ({cfg.num_train_epochs:g} epochs of {dataset_rows:,} rows)" if cfg.num_train_epochs else ""
    how_long = f"{steps} steps{of_rows}"
    batch = _Batch(gbs, dp, tokens_step, per_row, window, total, how_long)
    reasons = notes + _reasons(cfg, hardware, mem, cost, batch, row_tokens_note, throughput_note, tokens_per_second)
    reasons += _forward_reasons(cfg, shape, hardware, seq_len)
    warnings += _strategy_warnings(cfg, hardware)
    epochs = gbs * steps / dataset_rows if dataset_rows else None
    spec = model if isinstance(model, ModelSpec) else None
    return RunPlan(
        config=cfg,
        hardware=hardware,
        model_arch=shape.arch,
        model=spec,
        params=n,
        trainable_params=trainable,
        world_size=world,
        data_parallel_size=dp,
        tensor_parallel_size=tp,
        global_batch_size=gbs,
        max_steps=steps,
        tokens_per_step=tokens_step,
        total_tokens=total,
        epochs=epochs,
        memory=mem,
        cost=cost,
        reasons=reasons,
        warnings=warnings,
    )


def padded_length(cfg: TrainConfig, longest_row: int | None) -> int:
    """The tokens one sequence of a micro-batch holds at most: an unpacked SFT batch is padded to its longest row
    (TRL's collator), so the longest training row where it is shorter than max_length; else max_length (a packed
    window, or rows not all counted). The dates rows of 61 tokens under max_length 128 were sized at twice their
    activations."""
    method = get_method(cfg.method)
    if longest_row and method.cuts_rows and not method.packs(cfg) and method.row_sequences == 1:
        return max(1, min(longest_row, cfg.max_length))
    return cfg.max_length


def _row_window(cfg: TrainConfig, row_tokens: float | None) -> tuple[float, float]:
    """(the window a row may fill, the tokens a row computes): rows, not windows, where the method pads per row."""
    method = get_method(cfg.method)
    window = float(cfg.max_length)
    per_row = window
    if row_tokens and method.cuts_rows and not method.packs(cfg):
        # rows, not windows (padding-free or per-batch padding), of up to max_length in each of a row's sequences
        window = float(method.row_sequences * cfg.max_length)
        per_row = min(float(row_tokens), window)
    return window, per_row


def _cost(
    cfg: TrainConfig,
    shape: ModelShape,
    hardware: HardwareSpec,
    world: int,
    total: int,
    tokens_per_second: float | None,
) -> CostEstimate:
    """FLOPs, throughput (measured, else peak FLOP/s x the assumed MFU), hours and money for ``total`` tokens."""
    fpt = train_flops_per_token(shape, cfg.max_length, cfg.gradient_checkpointing)
    tps = tokens_per_second or world * hardware.peak_flops() * hardware.mfu() / fpt
    hours = total / tps / 3600
    return CostEstimate(
        flops=fpt * total,
        tokens_per_second=tps,
        hours=hours,
        device_hours=hours * world,
        throughput_source="measured" if tokens_per_second else "assumed",
        price_per_device_hour=hardware.price_per_device_hour,
        cost=hours * world * hardware.price_per_device_hour,
    )


@dataclass(frozen=True)
class _Batch:
    """What one optimizer step and the whole run compute, as the reasons print it."""

    gbs: int
    dp: int
    tokens_step: int
    per_row: float
    window: float
    total: int
    how_long: str


def _strategy_warnings(cfg: TrainConfig, hardware: HardwareSpec) -> list[str]:
    """What a strategy will meet on the training machines: a missing DeepSpeed, sharding over ethernet."""
    warnings = []
    if cfg.strategy in ("zero2", "zero3") and importlib.util.find_spec("deepspeed") is None:
        warnings.append("strategy: DeepSpeed is not installed here; install it on the training machines")
    if cfg.num_nodes > 1 and cfg.strategy in ("fsdp", "zero3") and hardware.fabric == "ethernet":
        warnings.append("strategy: full sharding over ethernet all-gathers every layer across nodes; expect low MFU")
    return warnings


def _reasons(
    cfg: TrainConfig,
    hardware: HardwareSpec,
    mem: MemoryEstimate,
    cost: CostEstimate,
    batch: _Batch,
    row_tokens_note: str | None,
    throughput_note: str | None,
    tokens_per_second: float | None,
) -> list[str]:
    """The plan's reasons a person reads: the batch, the tokens, the memory, the time and the cost."""
    tps, hours = cost.tokens_per_second, cost.hours
    world = cfg.num_nodes * cfg.devices_per_node
    gbs, dp, tokens_step, per_row, window = batch.gbs, batch.dp, batch.tokens_step, batch.per_row, batch.window
    total, how_long = batch.total, batch.how_long
    return [
        f"global batch {gbs} = {cfg.per_device_train_batch_size} per device x {cfg.gradient_accumulation_steps} "
        f"accumulation x {dp} data-parallel ranks; {tokens_step:,} tokens per step "
        + (
            f"(rows of ~{per_row:.1f} tokens, max_length {cfg.max_length}"
            + (f"; {row_tokens_note})" if row_tokens_note else ")")
            if per_row < window
            else f"(at max_length {cfg.max_length})"
        ),
        f"{total:,} tokens over {how_long}",
        f"{mem.total_gib:.2f} GiB per device of {hardware.device_memory_gib:g} GiB (weights {mem.weights_gib:.2f}, "
        f"grads {mem.gradients_gib:.2f}, optimizer {mem.optimizer_gib:.2f}, activations {mem.activations_gib:.2f})",
        f"~{hours * 60:.1f} min at {tps:,.0f} tokens/s"
        + (
            f" ({throughput_note})"
            if throughput_note
            else f" (peak FLOP/s x assumed MFU {hardware.mfu():g})"
            if not tokens_per_second
            else ""
        )
        + f", {hours * world:.2f} device-hours"
        + (f", cost {cost.cost:.2f}" if hardware.price_per_device_hour else ""),
    ]


def recommend(
    model: ModelSpec | ModelShape | int,
    hardware: HardwareSpec,
    *,
    base: TrainConfig | None = None,
    global_batch_size: int | None = None,
    vocab_size: int | None = None,
    deepspeed_available: bool | None = None,
    **plan_kwargs,
) -> RunPlan:
    """Choose precision, strategy, micro-batch, accumulation (and checkpointing) for the hardware.

    The global batch is kept at ``global_batch_size`` (default: the base config's
    per-device batch x accumulation), so a run moved to more devices optimises the same way.
    """
    base = base or TrainConfig()
    shape, _ = model_shape(model, vocab_size)
    if isinstance(model, int):
        shape = _scaled_shape(shape, model)
    world = hardware.world_size
    tp = base.tensor_parallel_size if world % base.tensor_parallel_size == 0 else 1
    dp = world // tp
    gbs = global_batch_size or base.per_device_train_batch_size * base.gradient_accumulation_steps
    if gbs < dp:
        raise BadInput(f"global_batch_size: {gbs} is smaller than the {dp} data-parallel ranks")
    update, why = _device_settings(base, hardware, tp)
    strategies = _strategies(hardware, deepspeed_available)
    seq_len = padded_length(base, plan_kwargs.get("longest_row"))
    cfg, strategy, mb, gc = _first_fit(base, update, strategies, shape, hardware, gbs, dp, seq_len)
    why += _layout_reasons(strategy, mb, cfg.gradient_accumulation_steps, gc, world=world, dp=dp, gbs=gbs)
    result = plan(cfg, shape, hardware, vocab_size=vocab_size, **plan_kwargs)
    spec = model if isinstance(model, ModelSpec) else None
    return result.model_copy(update={"params": shape.num_params(), "model": spec, "reasons": why + result.reasons})


def _adapters_only(cfg: TrainConfig) -> bool:
    """Adapters trained on a frozen base that bf16 can hold (``bf16_base.frozen_in_bf16``); a 4-bit base has its own
    compute dtype and needs CUDA."""
    return cfg.lora is not None and not cfg.lora.quantize_4bit


def _device_settings(base: TrainConfig, hardware: HardwareSpec, tp: int) -> tuple[dict, list[str]]:
    """Precision, device layout and kernels for the hardware, and why each was chosen."""
    why: list[str] = []
    if hardware.device == "cuda":
        precision = "bf16" if hardware.bf16 else "fp16"
        why.append(
            f"precision {precision}: "
            + (
                "the GPU has native bf16 (no loss scaling)"
                if hardware.bf16
                else "no bf16 on this GPU; fp16 with loss scaling"
            )
        )
    else:
        precision = "bf16" if hardware.bf16 and (base.precision == "bf16" or _adapters_only(base)) else "fp32"
        why.append(
            f"precision {precision}: CPU training"
            + (
                " with native bf16" + (": a bf16 base, fp32 adapters" if _adapters_only(base) else "")
                if precision == "bf16"
                else "; fp16 needs CUDA and emulated bf16 is 6-8x slower"
            )
        )
    update: dict = {
        "precision": precision,
        "num_nodes": hardware.nodes,
        "devices_per_node": hardware.devices_per_node,
        "tensor_parallel_size": tp,
    }
    if hardware.device == "cpu":
        if base.attn_implementation == "flash_attention_2":
            update["attn_implementation"] = "sdpa"
            why.append("attn_implementation sdpa: flash attention needs CUDA")
        if base.use_liger_kernel:
            update["use_liger_kernel"] = False
            why.append("use_liger off: Liger kernels need a GPU")
    return update, why


def _strategies(hardware: HardwareSpec, deepspeed_available: bool | None) -> list[str]:
    """The strategies to try, cheapest first."""
    if hardware.world_size == 1:
        return ["single"]
    if hardware.device == "cpu":
        return ["ddp"]
    ds = importlib.util.find_spec("deepspeed") is not None if deepspeed_available is None else deepspeed_available
    return ["ddp"] + (["zero2"] if ds else []) + ["fsdp"] + (["zero3"] if ds else [])


def _first_fit(
    base: TrainConfig,
    update: dict,
    strategies: list[str],
    shape: ModelShape,
    hardware: HardwareSpec,
    gbs: int,
    dp: int,
    seq_len: int | None = None,
) -> tuple[TrainConfig, str, int, bool]:
    """The first strategy (then checkpointing off before on) whose largest power-of-two micro-batch
    fits; raises PlanRefused when nothing fits even at micro-batch 1 with checkpointing."""
    cap = max(1, math.ceil(gbs / dp))
    for strategy in strategies:
        for gc in (False, True):
            mb = 1 << int(math.log2(cap))
            while mb >= 1:
                cfg = base.model_copy(
                    update={
                        **update,
                        "strategy": strategy,
                        "gradient_checkpointing": gc,
                        "per_device_train_batch_size": mb,
                        "gradient_accumulation_steps": math.ceil(gbs / (mb * dp)),
                    }
                )
                if _memory(cfg, shape, hardware, seq_len=seq_len).fits:
                    return cfg, strategy, mb, gc
                mb //= 2
    full = _memory(
        base.model_copy(
            update={
                **update,
                "strategy": strategies[-1],
                "gradient_checkpointing": True,
                "per_device_train_batch_size": 1,
            }
        ),
        shape,
        hardware,
        seq_len=seq_len,
    )
    raise PlanRefused(
        [
            Refusal(
                field="model",
                kind="impossible",
                reason=(
                    f"needs {full.total_gib:.2f} GiB per device even with {strategies[-1]}, micro-batch 1 and gradient "
                    f"checkpointing; {hardware.device_memory_gib:g} GiB available: "
                    "use LoRA, a smaller model or more devices"
                ),
            )
        ]
    )


def _layout_reasons(strategy: str, mb: int, grad_accum: int, gc: bool, *, world: int, dp: int, gbs: int) -> list[str]:
    """Why the chosen strategy, micro-batch and accumulation (and checkpointing)."""
    why = [
        {
            "single": "strategy single: one device",
            "ddp": f"strategy ddp: a full replica fits each of the {world} devices; only gradients are all-reduced",
            "zero2": "strategy zero2: replicas do not fit; sharding gradients and optimizer states is enough",
            "fsdp": "strategy fsdp: the training state must be fully sharded to fit (FSDP2, native torch)",
            "zero3": "strategy zero3: fully sharded with DeepSpeed",
        }[strategy]
    ]
    actual = mb * grad_accum * dp
    cap = max(1, math.ceil(gbs / dp))
    why.append(
        f"micro-batch {mb} x accumulation {grad_accum} x {dp} ranks = global batch {actual}"
        + ("" if actual == gbs else f" (asked {gbs}; rounded up to whole micro-batches)")
        + ("; the largest power-of-two micro-batch that fits" if mb < cap else "")
    )
    if gc:
        why.append("gradient checkpointing on: activations do not fit otherwise")
    return why
