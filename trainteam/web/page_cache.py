"""The run page's data, built once per half second however many people watch the run.

Twenty viewers polling a training run's page once a second each asked for the same nine queries
and the same graph scan twenty times a second (0.13 CPU s per second of training, on the machine
that trains). Here one build serves every request within ``ttl_s`` (viewers see a change at most
that late; the curves are streamed apart from this); a decision made in this console clears it, so
the person who decided sees their decision at once. A few lines of dict and lock: no cache library
is a dependency of the project, and this needs no eviction beyond the runs being watched.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
TTL_S = 0.5


class ShortLived(Generic[T]):
    """``get(key, build)``: the value built for ``key`` less than ``ttl_s`` ago, else a new build (one
    build at a time: requests arriving together share it). A build that raises is not kept."""

    def __init__(self, ttl_s: float = TTL_S, clock: Callable[[], float] = time.monotonic):
        self.ttl_s, self._clock = ttl_s, clock
        self._kept: dict[str, tuple[float, T]] = {}
        self._lock = threading.Lock()

    def get(self, key: str, build: Callable[[], T]) -> T:
        with self._lock:
            now = self._clock()
            kept = self._kept.get(key)
            if kept is not None and now - kept[0] < self.ttl_s:
                return kept[1]
            value = build()
            self._kept[key] = (self._clock(), value)
            if len(self._kept) > 256:  # runs nobody watches any more
                self._kept = {k: v for k, v in self._kept.items() if now - v[0] < self.ttl_s}
            return value

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
