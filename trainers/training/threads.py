"""Torch CPU threads chosen from what the neighbours use — once per run, then fixed.

On shared cores the best thread count flips with the neighbours' load: measured here,
a second torch thread made training 3–5× slower (a 256² matmul 25× slower) while
another job kept one of the 2 cores busy, and ~1.9× faster when the machine was idle.
Intra-op threads meet at a barrier after every op, so one descheduled thread stalls
them all: the rule is never more threads than cores the neighbours leave free.

How busy the neighbours are is measured, not guessed: over a window, the machine's
busy CPU time (/proc/stat via psutil) minus this process's own CPU time is the
neighbours' use, in cores (``neighbours_between``). The thresholds (drop at 0.3 of a
core, return under 0.15) were measured on the demo's SFT: a neighbour busy in short
bursts (15 % or 30 % duty cycle) still left 2 threads 1.5–1.6× faster than 1; a
neighbour busy all the time made 1 thread 3–5× faster than 2.

The count is chosen once, when a run starts, and then kept for every stage, resume and
replay of that run: float reductions depend on the thread count, so runs on 1 and 2
threads register different weights. An earlier version re-chose the count every 2 s
of training to follow the load; that made the same task give different weights from
one run to the next, so it went (issue 10: reproducible runs).
"""

from __future__ import annotations

import math
import os
import resource
import time

Sample = tuple[float, float, float]  # a cpu_sample(): (machine busy s, this process's CPU s, wall s)


def cpu_sample() -> Sample:
    """(machine busy CPU seconds, this process's CPU seconds, wall seconds), all cumulative."""
    import psutil

    t = psutil.cpu_times()
    # steal: time the hypervisor ran other guests; a stalled thread stalls the barrier just the same
    busy = t.user + t.system + sum(getattr(t, k, 0.0) for k in ("nice", "irq", "softirq", "steal"))
    r = resource.getrusage(resource.RUSAGE_SELF)
    return busy, r.ru_utime + r.ru_stime, time.perf_counter()


def neighbours_between(a: Sample, b: Sample) -> float:
    """Cores the neighbours used between two ``cpu_sample()`` readings: machine busy time minus ours."""
    return max(0.0, (b[0] - a[0]) - (b[1] - a[1])) / max(b[2] - a[2], 1e-9)


def neighbours_since(mark: Sample, min_s: float = 0.3) -> float:
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


def run_threads(requested: int | None = None, since: Sample | None = None, sample_s: float = 0.3) -> int:
    """The one thread rule: the torch thread count of a run, chosen once and then fixed (weights depend on it).

    ``requested`` (the task's ``threads``, or what a run recorded and passes on, so a resumed or replayed
    run trains on the same count) or ``TRAINTEAM_THREADS`` fix it; launched ranks (torchrun / accelerate
    set ``LOCAL_WORLD_SIZE``) share the node's cores; otherwise it is the cores the neighbours left free
    since ``since`` (a ``cpu_sample()``; this process's own CPU subtracted), measured over at least
    ``sample_s`` (``threads_for``). The load average is no guide: it still counts a run that ended a
    minute ago. The engine asks it as a run's training starts; the trainer as its set-up ends.
    """
    n = requested or int(os.environ.get("TRAINTEAM_THREADS") or 0)
    if n:
        return n
    cores = os.cpu_count() or 1
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    if ranks > 1:
        return max(1, cores // ranks)
    return threads_for(neighbours_since(since or cpu_sample(), sample_s), cores, current=cores)
