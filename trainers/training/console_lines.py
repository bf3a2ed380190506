"""The lines a run prints while it works: training steps, the recipe search's probes, evaluation.

Where they go is the caller's choice, held in a context variable the way ``budget.ceiling`` holds
the run's deadline: the engine points it at the run's log file and (with progress on) stderr for
the span of a step (``lines_to``); code below it only calls ``say``. Outside a run (a person calling
``train()`` from Python, a test) nothing is printed unless they ask with ``lines_to``. Imports
nothing heavy, so any room may call it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar

Sink = Callable[[str], None]

_sink: ContextVar[Sink | None] = ContextVar("trainteam_console_lines", default=None)


@contextlib.contextmanager
def lines_to(sink: Sink | None) -> Iterator[None]:
    """Inside the block, ``say(text)`` calls ``sink(text)`` (None: prints nothing)."""
    token = _sink.set(sink)
    try:
        yield
    finally:
        _sink.reset(token)


def say(text: str) -> bool:
    """One line of the run's output (rich markup allowed); False when nobody listens."""
    sink = _sink.get()
    if sink is None:
        return False
    sink(text)
    return True


def listening() -> bool:
    return _sink.get() is not None
