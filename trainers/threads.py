"""Torch CPU threads chosen from what the neighbours use, re-checked while training.

On shared cores the best thread count flips with the neighbours' load: measured here,
a second torch thread made training 3–5× slower (a 256² matmul 25× slower) while
another job kept one of the 2 cores busy, and ~1.9× faster when the machine was idle.
Intra-op threads meet at a barrier after every op, so one descheduled thread stalls
them all: the rule is never more threads than cores the neighbours leave free.

How busy the neighbours are is measured, not guessed, and costs nothing: over each
window of ``window_s`` seconds of training, the machine's busy CPU time (/proc/stat
via psutil) minus this process's own CPU time is the neighbours' use, in cores. A
single 0.3 s sample before training picked wrong often (jobs here come and go), so
the count follows that window for the whole run, with hysteresis so one burst does
not flip it. An earlier version probed 1 thread vs all cores by training steps on
each: every probe spent steps on the worse count (3–5× slower steps under load), which
cost 10–20 % of a short run against a fixed, hand-chosen count.

The thresholds (drop at 0.3 of a core, return under 0.15) were measured on this SFT:
a neighbour busy in short bursts (15 % or 30 % duty cycle, seen as 0.09 / 0.16 cores)
still left 2 threads 1.5–1.6× faster than 1; a neighbour busy all the time made 1
thread 3–5× faster than 2.

When the neighbours leave every core free, all cores are used without a probe: torch
only splits ops above its grain size (32k elements), so a model too small to gain from
threads also loses little on an idle machine.
"""

from __future__ import annotations

import math
import resource
import time
from typing import Callable

from transformers import TrainerCallback


def cpu_sample() -> tuple[float, float, float]:
    """(machine busy CPU seconds, this process's CPU seconds, wall seconds), all cumulative."""
    import psutil

    t = psutil.cpu_times()
    # steal: time the hypervisor ran other guests; a stalled thread stalls the barrier just the same
    busy = t.user + t.system + sum(getattr(t, k, 0.0) for k in ("nice", "irq", "softirq", "steal"))
    r = resource.getrusage(resource.RUSAGE_SELF)
    return busy, r.ru_utime + r.ru_stime, time.perf_counter()


def neighbours_between(a: tuple[float, float, float], b: tuple[float, float, float]) -> float:
    """Cores the neighbours used between two ``cpu_sample()`` readings: machine busy time minus ours."""
    return max(0.0, (b[0] - a[0]) - (b[1] - a[1])) / max(b[2] - a[2], 1e-9)


def neighbours_since(mark: tuple[float, float, float], min_s: float = 0.3) -> float:
    """Cores the neighbours used since ``mark`` (a ``cpu_sample()``), waiting out ``min_s`` if needed.

    This process's own CPU is subtracted, so the window can cover its own set-up work
    (loading data and model) instead of an idle wait.
    """
    wall = mark[2]
    left = min_s - (time.perf_counter() - wall)
    if left > 0:
        time.sleep(left)
    return neighbours_between(mark, cpu_sample())


def threads_for(others: float, cores: int, current: int, busy_at: float = 0.3, free_at: float = 0.15) -> int:
    """Thread count for neighbours using ``others`` cores, with hysteresis around idle.

    At all cores, drop only once the neighbours use ``busy_at`` of a core; below all
    cores, return to all only once they use under ``free_at``. Otherwise take the cores
    they leave free (at least one).
    """
    idle = others < (busy_at if current >= cores else free_at)
    if idle:
        return cores
    return max(1, min(cores, math.floor(cores - others + 0.1)))


class ThreadTuner(TrainerCallback):
    """Sets ``torch.set_num_threads`` from the neighbours' CPU use over each window of training."""

    def __init__(self, cores: int, start: int, window_s: float = 2.0, first_window_s: float = 0.5,
                 sampler: Callable[[], tuple[float, float, float]] = cpu_sample, set_threads: Callable[[int], None] | None = None):
        self.cores = cores
        self.current = start
        self.window_s = window_s
        self.first_window_s = first_window_s
        self.sampler = sampler
        self._set_threads = set_threads
        self.history: list[dict] = []  # one entry per change: step, neighbours' cores, threads
        self._mark: tuple[float, float, float] | None = None
        self._windows = 0

    def _set(self, n: int) -> None:
        if self._set_threads is not None:
            self._set_threads(n)
            return
        import torch

        torch.set_num_threads(n)

    def on_train_begin(self, args, state, control, **kwargs):
        self._mark = self.sampler()

    def on_step_end(self, args, state, control, **kwargs):
        if self._mark is None:
            self._mark = self.sampler()
            return
        now = self.sampler()
        if now[2] - self._mark[2] < (self.first_window_s if self._windows == 0 else self.window_s):
            return
        others = neighbours_between(self._mark, now)
        self._mark, self._windows = now, self._windows + 1
        n = threads_for(others, self.cores, self.current)
        if n != self.current or not self.history:
            self.history.append({"step": state.global_step, "neighbours_cores": round(others, 2), "threads": n})
        if n != self.current:
            self._set(n)
            self.current = n

    @property
    def chosen(self) -> int:
        """The count in use now (the last decision)."""
        return self.current
