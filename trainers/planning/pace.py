"""A run's own first steps against the planner's pace: measured, compared, re-planned aloud. No torch at import.

The plan a run was accepted on is an estimate made before anything trained (a calibration,
perhaps taken under another load, or the FLOP guess). The run itself is the better measurement:
after its first ``TIMED`` steps (the ``SKIPPED`` first ones build the optimizer's state and are
left out) ``PaceCheck`` knows the step time, the tokens per step and the load it met, and says:

    pace: steps 2-5 ran 2.41 s a step (151 tokens/s at load 0.1 of 2 cores, 2 threads); the 95 steps
    left take ~3.8 min; the planner's estimate was 9 tokens/s (measured ... ): off x16.8

The line goes to the run's output (``console_lines.say``) and the run history (``pace`` event), and
the numbers into the stage's telemetry (``pace_*``: the run's metrics and report). Where the stored
calibration was off by more than ``OFF_BY`` for the load the run met, a pretrain or SFT run's own pace
replaces it (``calibrate.store_run``): the next plan of this model on this machine reads what the run
met. A run with no stored calibration (the FLOP guess) stores nothing: ``trainteam validate`` measures.
A DPO run's pace is reported, not stored (its steps also run the reference model); GRPO's is not compared
(its time is generation, which no plan estimates).

Re-planning does not stop anything: if the steps left do not fit the time left, the line says where
the run's budget ceiling (``trainers.budget``) will stop it; that ceiling is what stops it, with a
checkpoint saved, and a person decides whether it goes on.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from pydantic import BaseModel, Field

from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.planning.calibrate import Calibration, cached, fit, shape_key, store_run
from trainteam.trainers.planning.estimate import ModelShape, train_flops_per_token
from trainteam.trainers.planning.hardware import detect_hardware
from trainteam.trainers.planning.load import Load, during
from trainteam.trainers.training import budget
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.console_lines import say
from trainteam.trainers.training.threads import cpu_sample

SKIPPED = 1  # the first step of a train() call: optimizer state, lazy set-up
TIMED = 4  # steps timed after it
OFF_BY = 1.5  # a pace this far from the estimate (either way) replaces a stored calibration


class PaceReading(BaseModel):
    """The first timed steps of a run and what they make of the plan."""

    first_step: int
    steps: int = Field(gt=0)
    step_s: float = Field(gt=0)
    tokens_per_s: float = Field(ge=0)
    micro_batch_tokens: float = Field(ge=0, description="non-padding tokens per micro-batch")
    load: Load
    threads: int
    steps_left: int
    minutes_left: float
    expected_tokens_per_s: float | None = None
    expected_note: str = ""
    stored: bool = Field(default=False, description="the run's pace replaced a stored calibration")
    ceiling_step: int | None = Field(
        default=None, description="where the budget ceiling stops training, if before the end"
    )

    @property
    def off_by(self) -> float | None:
        """Measured over expected (>1: faster than planned), None without an estimate."""
        if not self.expected_tokens_per_s or not self.tokens_per_s:
            return None
        return self.tokens_per_s / self.expected_tokens_per_s

    def line(self) -> str:
        head = (
            f"pace: steps {self.first_step}-{self.first_step + self.steps - 1} ran {self.step_s:.2f} s a step "
            f"({self.tokens_per_s:,.0f} tokens/s at {self.load.describe()}, {self.threads} thread"
            f"{'s' if self.threads != 1 else ''}); the {self.steps_left} steps left take ~{self.minutes_left:.1f} min"
        )
        ratio = self.off_by
        if ratio is not None:
            head += (
                f"; the planner's estimate for this load was {self.expected_tokens_per_s:,.0f} tokens/s "
                f"({self.expected_note})" + (f": off x{max(ratio, 1 / ratio):.1f}" if _off(ratio) else "")
            )
        if self.stored:
            head += "; this pace replaces the stored calibration"
        if self.ceiling_step is not None:
            head += (
                f"; the budget's ceiling stops training near step {self.ceiling_step} with a checkpoint saved, "
                "and a person decides whether it goes on"
            )
        return head

    def numbers(self) -> dict[str, float]:
        """The stage's telemetry: the run's metrics and report read these."""
        out = {
            "pace_step_s": round(self.step_s, 4),
            "pace_tokens_per_s": round(self.tokens_per_s, 1),
            "pace_minutes_left": round(self.minutes_left, 3),
            "pace_neighbours": self.load.neighbours,
        }
        if self.expected_tokens_per_s:
            out["pace_expected_tokens_per_s"] = round(self.expected_tokens_per_s, 1)
        return out


def _off(ratio: float) -> bool:
    return ratio > OFF_BY or ratio < 1 / OFF_BY


def expected_pace(
    shape: ModelShape, cfg: TrainConfig, micro_tokens: float, device: str, load: Load, threads: int
) -> tuple[float | None, str, str, Calibration | None]:
    """(tokens/s the planner would estimate under ``load`` on ``threads`` threads, how, the cache key, the
    stored calibration it came from or None): a stored calibration fitted to the load, else the FLOP guess."""
    key = shape_key(shape.signature(), cfg, micro_tokens, device=device)
    found = cached(key)
    fitted = fit(found, load, threads) if found is not None else None
    if fitted is not None:
        return fitted.tokens_per_s, fitted.describe(), key, found
    hw = detect_hardware()
    fpt = train_flops_per_token(shape, cfg.max_length, cfg.gradient_checkpointing)
    return hw.peak_flops() * hw.mfu() / fpt, f"a FLOP guess, assumed MFU {hw.mfu():g}", key, None


def read_pace(start: dict, state, cfg: TrainConfig, shape: ModelShape | None, device: str, threads: int) -> PaceReading:
    """The reading after the timed steps on ``threads`` torch threads: ``start`` holds the step, tokens, step
    time and cpu mark they began at; ``state`` is the Trainer's (global_step, num_input_tokens_seen, max_steps)."""
    steps = state.global_step - start["step"]
    tokens = (state.num_input_tokens_seen or 0) - start["tokens"]
    step_s = start["step_time"] / max(steps, 1)
    load = during(start["mark"], threads)
    micro = tokens / max(steps * cfg.gradient_accumulation_steps, 1)
    left = max(0, state.max_steps - state.global_step)
    reading = PaceReading(
        first_step=start["step"] + 1,
        steps=steps,
        step_s=step_s,
        tokens_per_s=tokens / max(start["step_time"], 1e-9),
        micro_batch_tokens=micro,
        load=load,
        threads=threads,
        steps_left=left,
        minutes_left=left * step_s / 60,
    )
    if shape is not None and tokens > 0 and not get_method(cfg.method).generates:  # its time is generation: no estimate
        tps, note, key, stored = expected_pace(shape, cfg, micro, device, load, threads)
        reading.expected_tokens_per_s, reading.expected_note = tps, note
        if (
            stored is not None
            and reading.off_by is not None
            and _off(reading.off_by)
            and device == "cpu"
            and get_method(cfg.method).calibrated  # a DPO step also runs the reference, a GRPO step samples
        ):
            _replace(key, stored, reading)
            reading.stored = True
    ceiling = budget.current()
    if ceiling is not None and left * step_s > ceiling.left_s():
        reading.ceiling_step = state.global_step + max(0, int(ceiling.left_s() / step_s))
    return reading


def _replace(key: str, stored: Calibration, reading: PaceReading) -> None:
    store_run(
        key,
        Calibration(
            tokens_per_s=reading.tokens_per_s,
            step_s=reading.step_s,
            tokens_per_step=stored.tokens_per_step,
            steps=reading.steps,
            threads=reading.threads,
            device="cpu",
            model=stored.model,
            source="run",
            load=reading.load,
            measured_at=datetime.now(UTC).isoformat(timespec="seconds"),
        ),
    )


_said: dict[str, float] = {}  # shape signature -> the pace last said in this process


def _news(reading: PaceReading) -> bool:
    """Whether a reading is worth a line: the first for its setup in this process, a pace that moved by a
    quarter since, a replaced calibration or a ceiling ahead (the recipe search's probes train the same
    setup a dozen times: one line says it)."""
    key = f"{reading.micro_batch_tokens:.0f}:{reading.expected_note[:40]}"
    last = _said.get(key)
    _said[key] = reading.tokens_per_s
    moved = last is None or not (0.8 <= reading.tokens_per_s / max(last, 1e-9) <= 1.25)
    return moved or reading.stored or reading.ceiling_step is not None


def model_shape_of(model) -> ModelShape | None:
    """The shape of the model a Trainer trains (a PEFT model's base config), or None where it cannot be read."""
    try:
        return ModelShape.from_config(model.config.to_dict())
    except Exception:  # noqa: BLE001 - an architecture the planner does not know: the pace is still measured
        return None


def pace_check(cfg: TrainConfig, history=None):
    """A Trainer callback that reads the run's pace after its first steps (``PaceCheck.reading``); None for a
    launched rank (each rank's pace is the launch's, not one process's)."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return None
    from transformers import TrainerCallback

    class PaceCheck(TrainerCallback):
        reading: PaceReading | None = None

        def __init__(self):
            self.start: dict | None = None
            self.shape: ModelShape | None = None
            self.begun = 0
            self._t: float | None = None

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            self.shape = model_shape_of(model) if model is not None else None
            self.begun = state.global_step

        def on_step_begin(self, args, state, control, **kwargs):
            self._t = time.perf_counter()
            if self.start is None and state.global_step >= self.begun + SKIPPED and self.reading is None:
                self.start = {
                    "step": state.global_step,
                    "tokens": state.num_input_tokens_seen or 0,
                    "step_time": 0.0,
                    "mark": cpu_sample(),
                }

        def on_step_end(self, args, state, control, **kwargs):
            if self.start is None or self._t is None or self.reading is not None:
                return
            self.start["step_time"] += time.perf_counter() - self._t
            if state.global_step - self.start["step"] >= TIMED or state.global_step >= state.max_steps:
                import torch

                self.reading = read_pace(self.start, state, cfg, self.shape, args.device.type, torch.get_num_threads())
                if _news(self.reading):
                    say(self.reading.line())
                if history is not None:
                    history.record("pace", **self.reading.model_dump(mode="json"))

    return PaceCheck()
