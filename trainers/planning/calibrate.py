"""Throughput measured on this machine: a few training steps of the real model, cached with its load.

The planner's FLOP-based guess (peak FLOP/s x an assumed MFU) was 5-10x off for a real
135M-parameter model on this CPU. ``calibrate`` loads the model the stage will train (a local
folder, or the spec's random-init shape), applies the stage's LoRA and gradient
checkpointing, and times forward + backward + AdamW steps on one micro-batch of the planned
size (``tokens`` per step, at most ``MAX_TOKENS``) until ``min_seconds`` have passed after a
short warm-up step. Tokens per second of that is the stage's throughput on this machine.

A measurement is cached per model shape, machine and step shape under ``cache_dir()``
(``$TRAINTEAM_CACHE_DIR/calibration``, default ``~/.cache/trainteam/calibration``): outside any
workspace, so ``trainteam validate`` writes no workspace, and every later plan of the same
model on the same machine reads it (``lookup``) without importing torch. A run's own first steps
are stored there too (``store_run``, ``planning.pace``): the next plan reads the pace the last
run trained at.

Each measurement records the load it was taken under (``load.Load``; issue 31: a calibration
timed beside another job said 9 tokens/s and every later plan of the idle machine believed
it). The thread count is not part of the key: threads follow the load. ``lookup`` fits a stored
measurement to the load now (``fit``: kept as it is when the cores a run would get are within
25 % of the cores it got, else scaled by their ratio, or left out when it was a multi-thread
measurement stalled by busy neighbours); ``calibrate`` (``trainteam validate``) measures again
instead of scaling, and ``remeasuring()`` makes it measure whatever is stored.
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import platform
import time
from collections.abc import Iterator
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from trainteam.core.errors import BadInput
from trainteam.trainers.planning.estimate import ModelShape
from trainteam.trainers.planning.load import (
    Load,
    cores_for,
    credited,
    during,
    load_now,
    remember,
    similar,
    speed_ratio,
    threads_under,
)
from trainteam.trainers.training.config import ModelSpec, TrainConfig
from trainteam.trainers.training.models import build_model
from trainteam.trainers.training.threads import cpu_sample
from trainteam.trainers.training.trainer_args import choose_threads, peft_config

KEY_VERSION = "2"  # 2: the model by its shape, no thread count, tokens in half-octave steps, the load recorded
MAX_TOKENS = 256  # tokens of the calibration micro-batch at most (a step of a 135M model on one busy CPU core: ~8 s)
MIN_TOKENS = 16
WARMUP_TOKENS = 32  # the warm-up step's (first-call set-up, not a measurement: kept short)


class Calibration(BaseModel):
    """One measurement: tokens per second of one process training this model at this shape, and its load."""

    tokens_per_s: float = Field(gt=0)
    step_s: float = Field(gt=0, description="mean seconds of a timed step")
    tokens_per_step: int = Field(gt=0)
    steps: int = Field(gt=0, description="timed steps (after one warm-up step)")
    threads: int | None = None
    device: str
    model: str
    measured_at: str
    source: Literal["calibration", "run"] = Field(
        default="calibration",
        description="calibration: timed steps on random tokens (validate); run: a run's own first steps",
    )
    load: Load | None = Field(default=None, description="the load it was measured under (CPU)")
    measured_tokens_per_s: float | None = Field(default=None, description="as measured, when tokens_per_s is scaled")
    note: str | None = Field(default=None, description="how this reading was fitted to now: scaled, or retaken")

    def describe(self) -> str:
        """How the throughput was made, for a plan's reasons and a refusal: "measured 160 tokens/s at load 0.3 ..."."""
        steps = f"{self.steps} step{'s' if self.steps != 1 else ''}"
        what = (
            f"{steps} of {self.tokens_per_step} tokens"
            if self.source == "calibration"
            else f"the first {steps} of a run"
        )
        threads = f"{self.threads} thread{'s' if self.threads != 1 else ''}" if self.threads else self.device
        at = f" at {self.load.describe()}" if self.load is not None else ""
        when = self.measured_at[:16].replace("T", " ")
        text = (
            f"measured {self.measured_tokens_per_s or self.tokens_per_s:,.0f} tokens/s on this machine{at} "
            f"on {when} ({what}, {threads})"
        )
        return text + (f"; {self.note}" if self.note else "")


def cache_dir() -> Path:
    root = os.environ.get("TRAINTEAM_CACHE_DIR") or Path.home() / ".cache" / "trainteam"
    return Path(root).expanduser() / "calibration"


def model_signature(spec: ModelSpec, vocab_size: int | None) -> str:
    """What identifies the model for speed: its shape (the same architecture in any folder, or built
    from the spec); the folder or spec itself where no shape can be read."""
    try:
        return ModelShape.from_spec(spec, vocab_size=vocab_size).signature()
    except (BadInput, OSError, ValueError, KeyError):
        return str(Path(spec.path).resolve()) if spec.path is not None else spec.model_dump_json(exclude={"path"})


def fixed_threads(cfg: TrainConfig) -> int | None:
    """The thread count training is held to (the config's, TRAINTEAM_THREADS), or None: chosen from the load."""
    env = os.environ.get("TRAINTEAM_THREADS")
    return cfg.threads or (int(env) if env and env.isdigit() and int(env) > 0 else None)


def machine_id(device: str) -> str:
    """This machine as a cache key: CPU model and count (or the GPU's name), torch's version."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(errors="ignore").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from importlib.metadata import version

    return f"{device}|{cpu}|{os.cpu_count()}|torch={version('torch')}"


def step_tokens(tokens: float) -> int:
    """The micro-batch a measurement times for ``tokens``: within 16..256, on a half-octave grid (16, 23, 32,
    45, 64, 91, 128, 181, 256), so a run's own batches (a few tokens more or fewer) find the same entry."""
    clamped = max(MIN_TOKENS, min(MAX_TOKENS, float(tokens)))
    return int(round(MIN_TOKENS * 2 ** (round(2 * math.log2(clamped / MIN_TOKENS)) / 2)))


def cache_key(spec: ModelSpec, cfg: TrainConfig, tokens: float, *, device: str, vocab_size: int | None = None) -> str:
    return shape_key(model_signature(spec, vocab_size), cfg, tokens, device=device)


def shape_key(signature: str, cfg: TrainConfig, tokens: float, *, device: str) -> str:
    """The cache key of a model (``model_signature``), a training setup and a micro-batch of ``tokens``."""
    lora = cfg.lora.model_dump_json() if cfg.lora else "full"
    parts = [
        KEY_VERSION,
        signature,
        machine_id(device),
        cfg.precision,
        cfg.attn_implementation,
        str(cfg.gradient_checkpointing),
        lora,
        str(step_tokens(tokens)),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:24]


def fit(cal: Calibration, now: Load, threads: int | None) -> Calibration | None:
    """``cal`` as it stands for a run under ``now`` on ``threads`` threads (None: chosen from the load): itself
    when the cores it would get are within 25 % of what it got, scaled by their ratio otherwise, None when it
    cannot be scaled (no load recorded, or several threads stalled by busy neighbours: that stands only for
    a run that would stall alike)."""
    if cal.device != "cpu":
        return cal
    if cal.load is None:
        return None
    t_now = threads_under(now, threads)
    ratio = speed_ratio(cal.load, cal.threads or cal.load.threads, now, t_now)
    if cal.load.stalled:  # its cores include spin-waiting: it stands only for a run that would stall alike
        stalls_now = Load(**{**now.model_dump(), "threads": t_now}).stalled
        return cal if stalls_now and similar(ratio) else None
    if similar(ratio):
        return cal
    tps = cal.tokens_per_s * ratio
    n = credited(cal.threads or cal.load.threads, t_now)
    note = (
        f"scaled x{ratio:.2f} to the {now.describe()} now ({n} thread{'s' if n > 1 else ''} would get "
        f"{cores_for(now, n):.2f} cores, it got {cal.load.share:.2f}"
        + (f"; the run's other {t_now - n} not counted until measured" if t_now > n else "")
        + f"): {tps:,.0f} tokens/s"
    )
    return cal.model_copy(
        update={
            "tokens_per_s": tps,
            "step_s": cal.step_s / ratio,
            "measured_tokens_per_s": cal.tokens_per_s,
            "note": note,
        }
    )


def lookup(
    spec: ModelSpec,
    cfg: TrainConfig,
    tokens: float,
    *,
    device: str,
    vocab_size: int | None = None,
    now: Load | None = None,
) -> Calibration | None:
    """The stored measurement for this model, machine and shape fitted to the load ``now`` (default: a
    short probe, ``load.load_now``), or None; imports no torch."""
    found = cached(cache_key(spec, cfg, tokens, device=device, vocab_size=vocab_size))
    if found is None or device != "cpu":
        return found
    return fit(found, now or load_now(), fixed_threads(cfg))


def cached(key: str) -> Calibration | None:
    """The stored measurement for ``key`` as stored, or None (missing or unreadable: measure again)."""
    path = cache_dir() / f"{key}.json"
    try:
        return Calibration.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def _store(key: str, cal: Calibration) -> None:
    folder = cache_dir()
    folder.mkdir(parents=True, exist_ok=True)
    tmp = folder / f".{key}.{os.getpid()}.tmp"
    tmp.write_text(cal.model_dump_json(indent=1, exclude={"measured_tokens_per_s", "note"}))
    tmp.replace(folder / f"{key}.json")


def store_run(key: str, cal: Calibration) -> None:
    """A run's own pace (``source="run"``) in place of what was stored: the next plan reads what the run met."""
    _store(key, cal)


_remeasure: ContextVar[bool] = ContextVar("trainteam_remeasure", default=False)


@contextlib.contextmanager
def remeasuring() -> Iterator[None]:
    """Inside, ``calibrate`` measures again whatever is stored (``trainteam validate --remeasure``)."""
    token = _remeasure.set(True)
    try:
        yield
    finally:
        _remeasure.reset(token)


def _stored_fits(found: Calibration, device: str, now: Load | None, threads: int | None) -> tuple[bool, str | None]:
    """(whether a stored measurement stands for now, and if not, why it is retaken)."""
    if _remeasure.get():
        return False, f"retaken as asked (the stored one said {found.tokens_per_s:,.0f} tokens/s)"
    if device != "cpu":
        return True, None
    now = now or load_now()
    fitted = fit(found, now, threads)
    if fitted is found:
        return True, None
    then = found.load.describe() if found.load is not None else "an unrecorded load"
    return False, (
        f"retaken: the stored {found.tokens_per_s:,.0f} tokens/s was measured at {then}, the {now.describe()} now"
    )


def calibrate(
    spec: ModelSpec,
    cfg: TrainConfig,
    tokens: float,
    *,
    device: str,
    tokenizer=None,
    vocab_size: int | None = None,
    min_seconds: float = 2.0,
    max_steps: int = 5,
    now: Load | None = None,
) -> Calibration:
    """Read back, or measure and store, the throughput of ``cfg``'s training of ``spec`` at ``tokens``
    per step on ``device`` (this machine's: ``HardwareSpec.device``). A stored measurement taken under
    another load than ``now`` (default: a short probe) is measured again, not scaled."""
    key = cache_key(spec, cfg, tokens, device=device, vocab_size=vocab_size)
    found = cached(key)
    why = None
    if found is not None:
        stands, why = _stored_fits(found, device, now, fixed_threads(cfg))
        if stands:
            return found
    threads = choose_threads(cfg) if device == "cpu" else None
    n = step_tokens(tokens)
    model = _model(spec, cfg, tokenizer, vocab_size).to(device)
    step_s, steps, load = _time_steps(model, cfg, n, device, min_seconds, max_steps)
    cal = Calibration(
        tokens_per_s=n / step_s,
        step_s=step_s,
        tokens_per_step=n,
        steps=steps,
        threads=threads,
        device=device,
        model=str(spec.path or "random init"),
        load=load if device == "cpu" else None,
        measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
    )
    _store(key, cal)
    if cal.load is not None:
        remember(cal.load)
    return cal.model_copy(update={"note": why})


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


def _time_steps(
    model, cfg: TrainConfig, n: int, device: str, min_seconds: float, max_steps: int
) -> tuple[float, int, Load]:
    """Mean seconds of a training step on one row of ``n`` random tokens after one warm-up step, the steps
    timed, and the load while they ran (the neighbours' cores, the cores this process got)."""
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
    mark = cpu_sample()
    while len(times) < max_steps and (not times or sum(times) < min_seconds):
        times.append(step())
    return sum(times) / len(times), len(times), during(mark, torch.get_num_threads())
