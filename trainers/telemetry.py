"""Run telemetry for the report and the knowledge graph.

tokens/s counts non-padding tokens (the work that trains); goodput is productive step
time over wall time, so checkpointing, start-up and interruptions show as lost time;
MFU is an estimate (6·N·tokens/s plus attention, over a nominal device peak).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from transformers import TrainerCallback

from trainteam.trainers.checkpoints import checkpoint_bytes

# Dense bf16 peaks (FLOP/s) of common accelerators; CPUs are estimated from cores × clock.
_GPU_PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10": 125e12, "L4": 121e12, "4090": 165e12, "3090": 71e12, "V100": 125e12, "T4": 65e12}


def device_peak_flops() -> tuple[float, str]:
    """A nominal peak for MFU: TRAINTEAM_PEAK_FLOPS overrides; else a table (GPU) or an AVX2 estimate (CPU)."""
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
    import psutil

    freq = (psutil.cpu_freq().max or psutil.cpu_freq().current or 2500.0) if psutil.cpu_freq() else 2500.0
    threads = torch.get_num_threads()
    # fp32 AVX2: 2 FMA units × 8 lanes × 2 FLOP per cycle per core.
    return threads * freq * 1e6 * 32, f"cpu {threads} threads × {freq:.0f} MHz × 32 FLOP/cycle"


def flops_per_token(model, seq_len: int) -> float:
    """Training FLOPs per token: 6·N for the matmuls plus 12·L·d·seq for attention scores."""
    n = sum(p.numel() for p in model.parameters())
    cfg = getattr(model, "config", None)
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", 0) or 0
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", 0) or 0
    return 6.0 * n + 12.0 * layers * hidden * seq_len


class RunHistory:
    """Attempts of one run in ``output_dir/run-history.jsonl``: start, saves, heartbeats, end.

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
        for prev, nxt in zip(attempts[:-1], attempts[1:]):
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
    """Measures step time, tokens, checkpoint saves and losses of one ``train()`` call."""

    def __init__(self, model, seq_len: int, wall_start: float, history: RunHistory | None = None, beat_s: float = 10.0):
        self.wall_start = wall_start
        self.history = history
        self.beat_s = beat_s
        self._last_beat = time.perf_counter()
        self.fpt = flops_per_token(model, seq_len)
        self.n_params = sum(p.numel() for p in model.parameters())
        self.step_time = 0.0
        self._t_step = None
        self._t_end = None
        self.save_time = 0.0
        self.save_bytes = 0
        self.saves: list[Path] = []
        self.losses: list[tuple[int, float]] = []
        self.logs: list[dict] = []
        self.tokens_start = 0
        self.tokens_end = 0
        self.steps_start = 0
        self.steps_end = 0

    def on_train_begin(self, args, state, control, **kwargs):
        self.tokens_start = self.tokens_end = state.num_input_tokens_seen or 0
        self.steps_start = self.steps_end = state.global_step

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
            self.logs.append({"step": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}})
            if isinstance(logs.get("loss"), (int, float)):
                self.losses.append((state.global_step, float(logs["loss"])))

    def summary(self, interruptions: int) -> dict:
        wall = time.perf_counter() - self.wall_start
        tokens = self.tokens_end - self.tokens_start
        tps = tokens / self.step_time if self.step_time > 0 else 0.0
        peak, peak_src = device_peak_flops()
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
            "flops_per_token": self.fpt,
            "mfu_estimate": round(tps * self.fpt / peak, 6) if peak else None,
            "peak_flops": peak,
            "peak_flops_source": peak_src,
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
