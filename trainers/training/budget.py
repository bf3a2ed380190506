"""The run's budget inside a step: a ceiling that training, evaluation and generation watch.

The engine knows what the run may still spend (wall seconds, and the cost ceiling turned
into seconds at the machine's price) and opens a ``ceiling`` around each step. The work
inside checks it as it goes — the Trainer at every step end (``budget_guard``: it saves a
checkpoint and stops), an evaluation or generation loop at every batch (``check``: it
raises ``BudgetExceeded``). The overrun past the ceiling is then at most one training step
(one logging interval at ``logging_steps=1``) plus one checkpoint save, or one eval batch.

The ceiling travels as a context variable, the way a cancel scope does (anyio, asyncio's
``timeout``): the batch loops in ``trainers`` stay callable without any budget, and no
function between the engine and the loop has to pass a deadline it does not use.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass

from trainteam.core import clock
from trainteam.core.errors import TrainteamError


@dataclass(frozen=True)
class Ceiling:
    """``deadline``: an instant of ``core.clock``; ``allowed_s``: what the run may spend in all."""

    deadline: float
    allowed_s: float

    def left_s(self) -> float:
        return self.deadline - clock.now()


class BudgetExceeded(TrainteamError):
    """Work reached the run's ceiling; the engine asks a person for ``exceed_budget``."""

    def __init__(self, where: str, allowed_s: float, late_s: float = 0.0):
        super().__init__(f"budget reached during {where} (the run may spend {allowed_s:.0f}s)")
        self.where, self.allowed_s, self.late_s = where, allowed_s, late_s

    def __reduce__(self):  # DBOS pickles a step's exception
        return (BudgetExceeded, (self.where, self.allowed_s, self.late_s))


_current: ContextVar[Ceiling | None] = ContextVar("trainteam_budget_ceiling", default=None)


@contextlib.contextmanager
def ceiling(left_s: float | None, allowed_s: float = 0.0) -> Iterator[Ceiling | None]:
    """Work inside may spend ``left_s`` more seconds (None: no ceiling)."""
    value = None if left_s is None else Ceiling(clock.now() + left_s, allowed_s)
    token = _current.set(value)
    try:
        yield value
    finally:
        _current.reset(token)


def current() -> Ceiling | None:
    return _current.get()


def check(where: str) -> None:
    """Raise ``BudgetExceeded`` once the current ceiling is reached (no ceiling: never)."""
    c = _current.get()
    if c is not None and c.left_s() <= 0:
        raise BudgetExceeded(where, c.allowed_s, -c.left_s())


def budget_guard(limit: Ceiling):
    """A Trainer callback that stops training at the ceiling with a checkpoint saved, so a
    granted extension resumes there; ``.hit_at`` is the step it stopped at (None: never).
    (Built here so that importing this module — the eval loops do — costs no transformers.)"""
    from transformers import TrainerCallback

    class BudgetGuard(TrainerCallback):
        def __init__(self):
            self.hit_at: int | None = None

        def _check(self, state, control):
            if self.hit_at is None and limit.left_s() <= 0:
                self.hit_at = state.global_step
                control.should_save = state.global_step > 0
                control.should_training_stop = True
            return control

        def on_train_begin(self, args, state, control, **kwargs):
            return self._check(state, control)

        def on_step_end(self, args, state, control, **kwargs):
            return self._check(state, control)

    return BudgetGuard()


def step_clock_callback():
    """A Trainer callback that moves the step clock (``core.clock``) at every step end; None on the wall clock.
    It goes before every callback that reads the clock (the budget guard, the search's deadline)."""
    if clock.step_seconds() is None:
        return None
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            clock.tick()
            return control

    return StepClock()
