"""Throughput measured on this machine: a few training steps of the real model, cached.

The planner's FLOP-based guess (peak FLOP/s x an assumed MFU) was 5-10x off for a real
135M-parameter model on this CPU. ``calibrate`` loads the model the stage will train (a local
folder, or the spec's random-init shape), applies the stage's LoRA and gradient
checkpointing, and times forward + backward + AdamW steps on one micro-batch of the planned
size (``tokens`` per step, at most ``MAX_TOKENS``) until ``min_seconds`` have passed after a
short warm-up step. Tokens per second of that is the stage's throughput on this machine, at the
thread count training will use.

A measurement is cached per model, machine and shape under ``cache_dir()``
(``$TRAINTEAM_CACHE_DIR/calibration``, default ``~/.cache/trainteam/calibration``): outside any
workspace, so ``trainteam validate`` writes no workspace, and every later plan of the same
model on the same machine reads it (``cached``) without importing torch.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, Field

from trainteam.core.hashing import sha256_file
from trainteam.trainers.config import ModelSpec, TrainConfig
from trainteam.trainers.models import build_model
from trainteam.trainers.trainer_args import choose_threads, peft_config

MAX_TOKENS = 256  # tokens of the calibration micro-batch at most (a step of a 135M model on one busy CPU core: ~8 s)
MIN_TOKENS = 16
WARMUP_TOKENS = 32  # the warm-up step's (first-call set-up, not a measurement: kept short)


class Calibration(BaseModel):
    """One measurement: tokens per second of one process training this model at this shape."""

    tokens_per_s: float = Field(gt=0)
    step_s: float = Field(gt=0, description="mean seconds of a timed step")
    tokens_per_step: int = Field(gt=0)
    steps: int = Field(gt=0, description="timed steps (after one warm-up step)")
    threads: int | None = None
    device: str
    model: str
    measured_at: str

    def describe(self) -> str:
        return (f"measured {self.tokens_per_s:,.0f} tokens/s on this machine ({self.steps} steps of "
                f"{self.tokens_per_step} tokens, {self.threads or '?'} threads, {self.measured_at[:16]})")


def cache_dir() -> Path:
    root = os.environ.get("TRAINTEAM_CACHE_DIR") or Path.home() / ".cache" / "trainteam"
    return Path(root).expanduser() / "calibration"


def _model_id(spec: ModelSpec, vocab_size: int | None) -> str:
    """What identifies the weights' shape: a folder's config.json (and its path), or the spec."""
    if spec.path is not None:
        config = Path(spec.path) / "config.json"
        digest = sha256_file(config)[:16] if config.is_file() else "no-config"
        return f"{Path(spec.path).resolve()}:{digest}"
    return spec.model_dump_json(exclude={"path"}) + f":vocab={vocab_size}"


def threads_setting(cfg: TrainConfig) -> str:
    """The thread count training will ask for: the config's, TRAINTEAM_THREADS, or "auto" (idle cores)."""
    return str(cfg.threads or os.environ.get("TRAINTEAM_THREADS") or "auto")


def machine_id(device: str, threads: str) -> str:
    """This machine as a cache key: CPU model and count (or the GPU's name), threads, torch's version."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="ignore").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib.metadata import version

    return f"{device}|{cpu}|{os.cpu_count()}|threads={threads}|torch={version('torch')}"


def step_tokens(tokens: float) -> int:
    return int(max(MIN_TOKENS, min(MAX_TOKENS, round(tokens))))


def cache_key(spec: ModelSpec, cfg: TrainConfig, tokens: float, *, device: str, vocab_size: int | None = None) -> str:
    lora = cfg.lora.model_dump_json() if cfg.lora else "full"
    parts = [_model_id(spec, vocab_size), machine_id(device, threads_setting(cfg)), cfg.precision,
             cfg.attn_implementation, str(cfg.gradient_checkpointing), lora, str(step_tokens(tokens))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def lookup(spec: ModelSpec, cfg: TrainConfig, tokens: float, *, device: str,
           vocab_size: int | None = None) -> Calibration | None:
    """The stored measurement for this model, machine and shape, or None; imports no torch."""
    return cached(cache_key(spec, cfg, tokens, device=device, vocab_size=vocab_size))


def cached(key: str) -> Calibration | None:
    """The stored measurement for ``key``, or None (missing or unreadable: measure again)."""
    path = cache_dir() / f"{key}.json"
    try:
        return Calibration.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def _store(key: str, cal: Calibration) -> None:
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{key}.{os.getpid()}.tmp"
    tmp.write_text(cal.model_dump_json(indent=1))
    tmp.replace(folder / f"{key}.json")


def calibrate(spec: ModelSpec, cfg: TrainConfig, tokens: float, *, device: str, tokenizer=None,
              vocab_size: int | None = None, min_seconds: float = 2.0, max_steps: int = 5) -> Calibration:
    """Read back, or measure and store, the throughput of ``cfg``'s training of ``spec`` at ``tokens``
    per step on ``device`` (this machine's: ``HardwareSpec.device``)."""
    key = cache_key(spec, cfg, tokens, device=device, vocab_size=vocab_size)
    found = cached(key)
    if found is not None:
        return found
    threads = choose_threads(cfg) if device == "cpu" else None
    n = step_tokens(tokens)
    model = _model(spec, cfg, tokenizer, vocab_size).to(device)
    step_s, steps = _time_steps(model, cfg, n, device, min_seconds, max_steps)
    cal = Calibration(tokens_per_s=n / step_s, step_s=step_s, tokens_per_step=n, steps=steps, threads=threads,
                      device=device, model=str(spec.path or "random init"),
                      measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    _store(key, cal)
    return cal


def _model(spec: ModelSpec, cfg: TrainConfig, tokenizer, vocab_size: int | None):
    """The model as the stage trains it: the weights (or the spec's shape), LoRA, checkpointing."""
    tok = tokenizer or _NoTokenizer(spec.vocab_size or vocab_size or 512)
    model = build_model(spec, tok, attn_implementation=cfg.attn_implementation)
    if cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    pc = peft_config(cfg)
    if pc is not None:
        from peft import get_peft_model

        model = get_peft_model(model, pc)
    return model.train()


class _NoTokenizer:
    """Stands in for the tokenizer a run trains later: only its size and special ids are read."""

    bos_token_id, eos_token_id, pad_token_id = 1, 2, 0

    def __init__(self, size: int):
        self.size = size

    def __len__(self) -> int:
        return self.size


def _time_steps(model, cfg: TrainConfig, n: int, device: str, min_seconds: float, max_steps: int) -> tuple[float, int]:
    """Mean seconds of a training step on one row of ``n`` random tokens, after one warm-up step."""
    import torch

    vocab = model.get_input_embeddings().weight.shape[0]
    gen = torch.Generator().manual_seed(0)
    rows = torch.randint(0, vocab, (1, n), generator=gen).to(device)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.precision)

    def step(ids=rows) -> float:
        start = time.perf_counter()
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype is not None):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - start

    step(rows[:, :WARMUP_TOKENS])  # warm-up: lazy set-up, the optimizer's state
    times: list[float] = []
    while len(times) < max_steps and (not times or sum(times) < min_seconds):
        times.append(step())
    return sum(times) / len(times), len(times)
