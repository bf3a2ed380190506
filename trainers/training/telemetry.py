"""Run telemetry for the report and the knowledge graph.

tokens/s counts non-padding tokens (the work that trains); goodput is productive step
time over wall time, so checkpointing, start-up and interruptions show as lost time.

MFU (model FLOPs utilisation) is tokens/s × FLOPs per token over the peak of the
devices that trained. FLOPs per token are counted from the model the Trainer trains (read
in ``on_train_begin``, so TRL's PEFT adapters and ``requires_grad`` are the real ones):

* forward: 2 FLOPs per weight of every matmul (``nn.Linear`` and HF ``Conv1D``, lm_head
  included, a tied lm_head too; embedding lookups, norms, activations and biases are not
  counted);
* backward, activation gradients: another 2 per matmul weight, trainable or not (a frozen
  LoRA base still passes gradients through to the adapters; layers before the first
  trainable weight need none, which is not subtracted);
* backward, weight gradients: 2 per *trainable* matmul weight;
* attention scores (QKᵀ and AV, no weights): 4·L·d·ctx forward and 8·L·d·ctx backward
  (both operands are activations), the full-square convention of PaLM's MFU, where ctx is
  the token-weighted mean length of the sequences a token attends over, measured on up to
  1,024 training rows: ``seq_len`` for packed pretraining windows, the rows' (or packed
  segments') own lengths for SFT, prompt + chosen / rejected for DPO; ``seq_len`` where
  the rows cannot be read (GRPO's prompts are not tokenized yet, a streamed dataset).

So full fine-tuning is 6·N_matmul + 12·L·d·ctx and LoRA 4·N_base + 6·N_lora + 12·L·d·ctx,
per token the Trainer counts (non-padding input tokens: DPO's chosen and rejected
sequences both, GRPO's prompts + completions that the loss trains on).
Not counted: the forward pass recomputed by gradient checkpointing (this is MFU, not
hardware FLOPs utilisation); the optimizer step; DPO's reference-model forward passes;
GRPO's generation (sampling the completions, token by token) and its reference log-prob
passes. They are work the device does, but not training FLOPs here, so in DPO and above
all GRPO runs the MFU understates how busy the device was.

The peak: ``TRAINTEAM_PEAK_FLOPS`` (FLOP/s of one process's device) overrides; a GPU uses
a table of dense bf16 peaks; a CPU is threads × clock × FLOP/cycle per core, where the
threads are those training ran with (read at every step, time-weighted, at most the
physical cores), the FLOP/cycle comes from /proc/cpuinfo flags (fp32: AVX-512 64, AVX2+FMA
32, else 16; bf16 training: AMX 1024, AVX512-BF16 128) and the clock is psutil's maximum
(the boost ceiling, so the peak is an upper bound), or its current reading where no
maximum is reported (VMs) — a core boosting above that reading makes MFU read high by the
boost ratio. The peak is multiplied by the world size (tokens are summed over ranks).
An ``mfu_estimate`` above 1 is a bug in this count or in the peak.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from trainteam.trainers.training.checkpoints import checkpoint_bytes

# Dense bf16 peaks (FLOP/s) of common accelerators; CPUs are estimated from cores × clock.
_GPU_PEAKS = {
    "H200": 989e12,
    "H100": 989e12,
    "A100": 312e12,
    "L40S": 362e12,
    "A10": 125e12,
    "L4": 121e12,
    "4090": 165e12,
    "3090": 71e12,
    "V100": 125e12,
    "T4": 65e12,
}
_CONTEXT_SAMPLE = 1024  # training rows read to measure the attention context


def cpu_flags() -> set[str]:
    """The feature flags of the first CPU in /proc/cpuinfo (empty where there is none)."""
    try:
        with open("/proc/cpuinfo", errors="ignore") as fh:
            for line in fh:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_flops_per_cycle(flags: set[str], bf16: bool = False) -> tuple[int, str]:
    """Peak FLOPs per cycle of one core: 2 FMA pipes × lanes × 2, by the widest vector unit."""
    if bf16 and "amx_bf16" in flags:
        return 1024, "AMX-BF16"
    if bf16 and "avx512_bf16" in flags:
        return 128, "AVX512-BF16"
    if "avx512f" in flags:
        return 64, "AVX-512"
    if "avx2" in flags and "fma" in flags:
        return 32, "AVX2+FMA"
    return 16, "SSE/AVX"


def cpu_mhz() -> tuple[float, str]:
    """psutil's maximum clock (the boost ceiling), else its current reading, else 2.5 GHz."""
    import psutil

    freq = psutil.cpu_freq()
    if freq and freq.max:
        return float(freq.max), "max"
    if freq and freq.current:
        return float(freq.current), "current"
    return 2500.0, "assumed"


def cpu_cores() -> int:
    """Physical cores: more threads than this share the cores' vector units."""
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def device_peak_flops(threads: float | None = None, bf16: bool = False) -> tuple[float, str]:
    """One process's nominal peak: TRAINTEAM_PEAK_FLOPS, else a GPU table, else CPU threads × clock × FLOP/cycle.

    ``threads`` defaults to ``torch.get_num_threads()`` now; the CPU counts at most its physical cores.
    """
    env = os.environ.get("TRAINTEAM_PEAK_FLOPS")
    if env:
        return float(env), "TRAINTEAM_PEAK_FLOPS"
    import torch

    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        for key, peak in _GPU_PEAKS.items():
            if key in name:
                return peak, name
        return 100e12, f"{name} (assumed 100 TFLOP/s)"
    threads = float(threads if threads is not None else torch.get_num_threads())
    cores = min(threads, float(cpu_cores()))
    mhz, clock = cpu_mhz()
    per_cycle, unit = cpu_flops_per_cycle(cpu_flags(), bf16)
    src = f"cpu {cores:g} cores × {mhz:.0f} MHz ({clock}) × {per_cycle} FLOP/cycle ({unit})"
    return cores * mhz * 1e6 * per_cycle, src


def matmul_weights(model) -> tuple[int, int]:
    """(weights of every matmul, those that train): ``nn.Linear`` and HF ``Conv1D`` modules.

    A PEFT LoRA layer is a wrapper, not itself a Linear: its ``base_layer``, ``lora_A`` and
    ``lora_B`` are counted. A tied lm_head counts: it is a matmul even if its weight is shared.
    """
    from torch import nn
    from transformers.pytorch_utils import Conv1D

    total = trainable = 0
    for module in model.modules():
        if isinstance(module, (nn.Linear, Conv1D)) and not hasattr(module, "base_layer"):
            n = module.weight.numel()
            total += n
            trainable += n if module.weight.requires_grad else 0
    return total, trainable


def _attention_dims(model) -> tuple[int, int]:
    """(layers, width of the attention scores: heads × head_dim, else hidden size)."""
    cfg: Any = getattr(model, "config", None)
    cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", 0) or 0
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", 0) or 0
    heads, head_dim = getattr(cfg, "num_attention_heads", None), getattr(cfg, "head_dim", None)
    return int(layers), int(heads * head_dim if isinstance(heads, int) and isinstance(head_dim, int) else hidden)


def flop_counts(model, context: float) -> dict:
    """Training FLOPs per token, by part (see the module docstring for what is counted)."""
    n_mm, n_train = matmul_weights(model)
    layers, width = _attention_dims(model)
    attn = layers * width * context
    forward = 2.0 * n_mm + 4.0 * attn
    backward = 2.0 * n_mm + 8.0 * attn + 2.0 * n_train
    return {
        "matmul_weights": n_mm,
        "trainable_matmul_weights": n_train,
        "attention_context": float(context),
        "forward": forward,
        "backward": backward,
        "total": forward + backward,
    }


def flops_per_token(model, seq_len: float) -> float:
    """Training FLOPs per token of ``model`` with attention over ``seq_len`` positions."""
    return flop_counts(model, seq_len)["total"]


def _segments(rows, cols) -> list[int]:
    """Lengths of the sequences the model runs on, per row: packed SFT segments, DPO's
    prompt + chosen and prompt + rejected, else the row."""
    if "seq_lengths" in cols:
        return [int(x) for s in rows["seq_lengths"] for x in s]
    if {"prompt_ids", "chosen_ids", "rejected_ids"} <= set(cols):
        pairs = zip(rows["prompt_ids"], rows["chosen_ids"], rows["rejected_ids"], strict=True)
        return [len(p) + len(c) for p, chosen, rejected in pairs for c in (chosen, rejected)]
    if "input_ids" in cols:
        return [len(ids) for ids in rows["input_ids"]]
    return []


def attention_context(dataset, seq_len: int, sample: int = _CONTEXT_SAMPLE) -> float:
    """Token-weighted mean length of the sequences a training token attends over, at most ``seq_len``.

    Read on up to ``sample`` rows spread over the training dataset (see ``_segments``);
    ``seq_len`` when they cannot be read (a streamed dataset, GRPO's untokenized prompts).
    """
    try:
        n, cols = len(dataset), dataset.column_names
        rows = dataset.select(range(0, n, max(1, n // sample))[:sample]) if n else {}
        lengths = [min(x, seq_len) for x in _segments(rows, cols)] if n else []
    except (AttributeError, TypeError, KeyError, NotImplementedError):
        return float(seq_len)
    tokens = sum(lengths)
    return sum(x * x for x in lengths) / tokens if tokens else float(seq_len)


class RunHistory:
    """Attempts of one run in ``output_dir/run-history.jsonl``: start, saves, heartbeats, logs, end.

    A start with no end is an interruption (kill -9 leaves no end). Saves record the step
    time spent up to each checkpoint, so the work an interruption threw away (steps after
    the checkpoint the next attempt resumed from) counts as lost in the run's goodput.
    """

    def __init__(self, output_dir: Path):
        self.path = Path(output_dir) / "run-history.jsonl"

    def _events(self) -> list[dict]:
        if not self.path.is_file():
            return []
        out = []
        for line in self.path.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
        return out

    def interruptions(self) -> int:
        n, open_start = 0, False
        for ev in self._events():
            if ev.get("event") == "start":
                n += open_start
                open_start = True
            elif ev.get("event") == "end":
                n += ev.get("reason") == "interrupted"
                open_start = False
        return n + open_start

    def run_goodput(self, current_step_time: float, current_wall: float) -> float | None:
        """Kept step time over wall time across every attempt, the current one included."""
        attempts: list[list[dict]] = []
        for ev in self._events():
            if ev.get("event") == "start":
                attempts.append([ev])
            elif attempts:
                attempts[-1].append(ev)
        if not attempts:
            return None
        kept, wall = current_step_time, current_wall
        for prev, nxt in zip(attempts[:-1], attempts[1:], strict=True):
            wall += max(0.0, prev[-1]["time"] - prev[0]["time"]) + prev[0].get("setup_s", 0.0)
            resume_step = nxt[0].get("resume_step") or 0
            saved = [e for e in prev if e.get("event") in ("save", "end") and e.get("step") == resume_step]
            kept += saved[-1].get("step_time", 0.0) if saved else 0.0
        return round(kept / wall, 4) if wall > 0 else None

    def methods(self) -> set[str]:
        return {ev["method"] for ev in self._events() if ev.get("event") == "start" and ev.get("method")}

    def record(self, event: str, **fields) -> None:
        if int(os.environ.get("RANK", "0")) != 0:  # one history per run, written by rank 0
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a") as fh:
            fh.write(json.dumps({"event": event, "time": time.time(), **fields}, default=str) + "\n")


class Telemetry(TrainerCallback):
    """Measures step time, tokens, checkpoint saves and losses of one ``train()`` call.

    The FLOPs per token are re-counted in ``on_train_begin`` from the model the Trainer
    trains (``model`` is the one ``train()`` was given, before TRL applies a ``peft_config``).
    """

    def __init__(self, model, seq_len: int, wall_start: float, history: RunHistory | None = None, beat_s: float = 10.0):
        self.wall_start = wall_start
        self.history = history
        self.beat_s = beat_s
        self.seq_len = seq_len
        self._last_beat = time.perf_counter()
        self._count_model(model, float(seq_len))
        self.threads = None  # torch threads at train begin (a run fixes its count for the whole training)
        self.world_size = 1
        self.bf16 = False
        self.step_time = 0.0
        self._t_step: float | None = None
        self._t_end: float | None = None
        self.save_time = 0.0
        self.save_bytes = 0
        self.saves: list[Path] = []
        self.losses: list[tuple[int, float]] = []
        self.logs: list[dict] = []
        self.tokens_start = 0
        self.tokens_end = 0
        self.steps_start = 0
        self.steps_end = 0

    def _count_model(self, model, context: float) -> None:
        self.flops = flop_counts(model, context)
        self.fpt = self.flops["total"]
        self.n_params = sum(p.numel() for p in model.parameters())
        self.n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)

    def on_train_begin(self, args, state, control, model=None, train_dataloader=None, **kwargs):
        import torch

        self.tokens_start = self.tokens_end = state.num_input_tokens_seen or 0
        self.steps_start = self.steps_end = state.global_step
        self.threads = torch.get_num_threads()
        self.world_size = max(1, int(getattr(args, "world_size", 1) or 1))
        self.bf16 = bool(getattr(args, "bf16", False))
        if model is not None:
            context = attention_context(getattr(train_dataloader, "dataset", None), self.seq_len)
            self._count_model(model, context)

    def on_step_begin(self, args, state, control, **kwargs):
        self._t_step = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.perf_counter()
        if self._t_step is not None:
            self.step_time += now - self._t_step
        self._t_end = now
        self.tokens_end = state.num_input_tokens_seen or 0
        self.steps_end = state.global_step
        if self.history is not None and now - self._last_beat >= self.beat_s and state.is_world_process_zero:
            self._last_beat = now
            self.history.record("beat", step=state.global_step, step_time=self.step_time)

    def on_save(self, args, state, control, **kwargs):
        path = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        if path.is_dir():
            self.saves.append(path)
            if self._t_end is not None:
                self.save_time += time.perf_counter() - self._t_end
            self.save_bytes += checkpoint_bytes(path)
            if self.history is not None and state.is_world_process_zero:
                self.history.record("save", step=state.global_step, step_time=self.step_time)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs:
            self.logs.append(
                {"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}}
            )
            if self.history is not None and state.is_world_process_zero:  # the live curve (`trainteam web`)
                self.history.record("log", **self.logs[-1])
            if isinstance(logs.get("loss"), (int, float)):
                self.losses.append((state.global_step, float(logs["loss"])))

    def peak(self) -> tuple[float, str, float | None]:
        """(FLOP/s of every rank together, its source, the torch threads training ran on)."""
        threads = self.threads
        peak, src = device_peak_flops(threads, self.bf16)
        if self.world_size > 1:
            peak, src = peak * self.world_size, f"{self.world_size} ranks × {src}"
        return peak, src, (round(threads, 2) if threads is not None else None)

    def summary(self, interruptions: int) -> dict:
        wall = time.perf_counter() - self.wall_start
        tokens = self.tokens_end - self.tokens_start
        tps = tokens / self.step_time if self.step_time > 0 else 0.0
        peak, peak_src, threads = self.peak()
        return {
            "wall_s": round(wall, 3),
            "step_time_s": round(self.step_time, 3),
            "steps": self.steps_end - self.steps_start,
            "tokens": int(tokens),
            "tokens_per_s": round(tps, 1),
            "goodput": round(self.step_time / wall, 4) if wall > 0 else 0.0,
            "run_goodput": self.history.run_goodput(self.step_time, wall) if self.history else None,
            "interruptions": interruptions,
            "checkpoint_saves": len(self.saves),
            "checkpoint_bytes": self.save_bytes,
            "checkpoint_bytes_per_s": round(self.save_bytes / self.save_time, 1) if self.save_time > 0 else None,
            "params": self.n_params,
            "trainable_params": self.n_trainable,
            "flops_per_token": self.fpt,
            "flops": self.flops,
            "mfu_estimate": round(tps * self.fpt / peak, 6) if peak and tps > 0 else None,
            "peak_flops": peak,
            "peak_flops_source": peak_src,
            "peak_threads": threads,
        }


class GracefulStop(TrainerCallback):
    """SIGTERM/SIGINT during training: save a checkpoint at the next step end and stop."""

    def __init__(self):
        self.requested = False
        self._old: dict = {}

    def install(self) -> None:
        import threading

        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGTERM, signal.SIGINT):
            self._old[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)
        self._old.clear()

    def _handle(self, signum, frame):
        if self.requested:  # a second signal: give up now
            self.uninstall()
            raise KeyboardInterrupt
        self.requested = True

    def on_step_end(self, args, state, control, **kwargs):
        if self.requested:
            control.should_save = True
            control.should_training_stop = True
        return control


class RankAgreement(TrainerCallback):
    """In a launched run every rank stops (and saves) at the same step end: a signal or the budget's
    ceiling seen by one rank only would leave the others waiting in the next all-reduce. Registered
    after the callbacks that decide; one all-reduce of two flags per step."""

    def on_step_end(self, args, state, control, **kwargs):
        import torch
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
            return control
        flags = torch.tensor([int(control.should_training_stop), int(control.should_save)], device=args.device)
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        control.should_training_stop, control.should_save = bool(flags[0]), bool(flags[1])
        return control
