"""The run's clock: the seconds a budget and a search deadline count.

By default it is the wall clock (``time.monotonic``). With ``TRAINTEAM_STEP_CLOCK=<seconds>`` it is a
step clock: it moves only when a training step ends (``tick``, called by the trainer's callback in
``trainers/training/budget.py``), by that many seconds a step, and everything else (imports, data, evaluation)
costs nothing. A budget then ends at the same step on any machine, however busy: the tests use it so a
budget's verdict never depends on how fast the machine is, and a person may use it to rehearse how a
budget splits between stages (``runs show`` reports the seconds the step clock counted).

Hand-written: the standard library's clocks cannot be replaced per process, and a test's run is a
separate process, so the choice travels in the environment.
"""

from __future__ import annotations

import os
import threading
import time

from trainteam.core.errors import BadInput

ENV = "TRAINTEAM_STEP_CLOCK"

_lock = threading.Lock()
_ticks = 0


def step_seconds() -> float | None:
    """Seconds a training step counts on the step clock; None: the wall clock counts."""
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        raise BadInput(f"{ENV}: {raw!r} is not a number of seconds") from None
    if not value > 0 or value == float("inf"):
        raise BadInput(f"{ENV}: {raw!r} must be a positive number of seconds")
    return value


def now() -> float:
    """The clock's reading in seconds (only differences mean anything)."""
    per_step = step_seconds()
    if per_step is None:
        return time.monotonic()
    with _lock:
        return _ticks * per_step


def tick(steps: int = 1) -> None:
    """``steps`` training steps ended: the step clock moves on (the wall clock moves by itself)."""
    global _ticks
    with _lock:
        _ticks += steps
