"""The plain progress lines of a run's long loops: training steps, probes, evaluation (issue 31).

A line goes out through ``console_lines.say`` (so only while someone listens: the engine, for
the span of a step) at a cadence: at least every ``TERMINAL_EVERY_S`` seconds when stderr is a
terminal and every ``PIPED_EVERY_S`` when it is piped (a log, CI, ``| cat``), where a line
is a record rather than a redraw. ``TRAINTEAM_PROGRESS_EVERY`` (seconds, 0: every step or batch)
overrides both. The clock is injectable, so tests count lines without depending on the
machine's speed. The Trainer callback that uses this for training is ``progress.StepLines``
(it imports transformers); the evaluation loops use ``RowLines``. Imports nothing heavy.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from rich.markup import escape

from trainteam.trainers.training import console_lines

Clock = Callable[[], float]

TERMINAL_EVERY_S = 10.0
PIPED_EVERY_S = 30.0
EVERY_ENV = "TRAINTEAM_PROGRESS_EVERY"


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by something without isatty, or closed
        return False


def every_s() -> float:
    """Seconds between two lines: ``TRAINTEAM_PROGRESS_EVERY`` if set (and a number ≥ 0), else by stderr."""
    raw = os.environ.get(EVERY_ENV, "").strip()
    if raw:
        try:
            value = float(raw)
        except ValueError:
            value = -1.0
        if value >= 0:
            return value
    return TERMINAL_EVERY_S if stderr_is_terminal() else PIPED_EVERY_S


def duration(seconds: float) -> str:
    """``40s``, ``3m12s``, ``1h02m``: a person's reading of an ETA."""
    s = max(0, int(round(seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


@dataclass
class Cadence:
    """Whether a line is due now: the first at once (``last=None``) or ``every`` after ``last``."""

    every: float
    clock: Clock = time.monotonic
    last: float | None = None

    def due(self) -> bool:
        now = self.clock()
        if self.last is not None and now - self.last < self.every:
            return False
        self.last = now
        return True


def say_plain(text: str) -> bool:
    """``text`` as one line of the run's output, rich markup escaped (a label may hold brackets)."""
    return console_lines.say(escape(text))


class RowLines:
    """Lines of an evaluation loop over rows: ``  evaluation: exact match 64/200 rows · ETA 40s``.

    The first once the cadence has passed since the loop started (a loop of a few seconds prints
    nothing: it leaves no silence to fill), then at the cadence. ``done(rows)`` after each batch.
    """

    def __init__(self, what: str, total: int, *, clock: Clock = time.monotonic, every: float | None = None):
        self.label = eval_label(what)
        self.total = total
        self.clock = clock
        self.start = clock()
        self.cadence = Cadence(every_s() if every is None else every, clock, last=self.start)

    def done(self, rows: int) -> bool:
        """Record ``rows`` finished; True when a line was printed."""
        if not console_lines.listening() or not self.cadence.due():
            return False
        elapsed = self.clock() - self.start
        eta = elapsed / rows * (self.total - rows) if rows > 0 else None
        tail = f" · ETA {duration(eta)}" if eta is not None and rows < self.total else ""
        return say_plain(f"  {self.label} {rows}/{self.total} rows{tail}")


def eval_label(what: str) -> str:
    """``evaluation (exact match)`` (a budget stop's wording) reads ``evaluation: exact match`` in a line."""
    if what.startswith("evaluation (") and what.endswith(")"):
        return f"evaluation: {what[len('evaluation (') : -1]}"
    return what


@dataclass
class StepState:
    """What a training line says, as the step-line callback read it from the trainer."""

    label: str
    step: int
    max_steps: int
    steps_done: int  # by this train() call (a resumed run started at a later step)
    elapsed_s: float
    tokens: int  # non-padding input tokens seen by this call
    loss: float | None


def step_line(s: StepState, final: bool = False) -> str:
    """``  sft step 40/300 · loss 1.234 · 812 tokens/s · ETA 3m12s`` (plain text, not markup)."""
    parts = [f"  {s.label} step {s.step}/{s.max_steps}"]
    if s.loss is not None:
        parts.append(f"loss {s.loss:.4g}")
    if s.tokens > 0 and s.elapsed_s > 0:
        parts.append(f"{s.tokens / s.elapsed_s:,.0f} tokens/s")
    if final:
        parts.append(f"{'finished' if s.step >= s.max_steps else 'stopped'} after {duration(s.elapsed_s)}")
    elif s.steps_done > 0 and s.max_steps > s.step:
        parts.append(f"ETA {duration(s.elapsed_s / s.steps_done * (s.max_steps - s.step))}")
    return " · ".join(parts)
