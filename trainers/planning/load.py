"""How busy this machine is, in the terms a throughput measurement needs. No torch.

A measurement of training speed is only as good as the load it was taken under: issue 31's
calibration was timed while another job kept the 2 cores busy (9 tokens/s), cached, and reused by
every later plan of an idle machine (160 tokens/s). Measured on that machine (SmolLM2-135M, LoRA,
the calibration's 256-token step, one torch thread, beside 0-2 spinning neighbours and other
engineers' jobs): the process trained at 20-66 tokens/s while the cores it got ran 0.13-0.47,
and its tokens per CPU-second held at 134-158. So the
invariant is the speed *per core the process gets*; the load only changes how many cores that is.

A measurement records ``Load``: the cores the neighbours used (machine busy time minus this
process's, ``threads.cpu_sample``), the cores this process got (its CPU seconds over wall
seconds) with how many threads, and the 1-minute load average (for the person reading).
Now is read the same way with a short probe (``load_now``): one thread spinning for half a
second gets the share of a core the scheduler gives a newcomer, and the neighbours' use is read
beside it. ``cores_for(load, threads)`` is what ``threads`` training threads would get under
that load; a measurement is scaled by the ratio of the cores it would get now to the cores it got,
counting no more threads than it was measured with (``credited``).

What is not scaled: a measurement with more than one thread taken beside busy neighbours. Torch's
threads meet at a barrier after every op and one descheduled thread stalls them all (3-5x slower,
``trainers/training/threads.py``), so the cores such a process "got" include spin-waiting: its speed per
core is not the machine's. It is retaken (``trainteam validate``) or, where nothing may be
measured, left out for the FLOP guess.
"""

from __future__ import annotations

import os
import time

from pydantic import BaseModel, Field

from trainteam.trainers.training.threads import cpu_sample, neighbours_between, threads_for

PARALLEL_EFFICIENCY = 0.95  # idle, 2 torch threads trained ~1.9x faster than 1 (shared/LIBRARY-NOTES.md)
SIMILAR = 1.25  # cores now within this factor of the cores then: the same load, the measurement stands
STALL_NEIGHBOURS = 0.3  # the neighbours' use (cores) at which threads.py drops a thread: above it, barriers stall
PROBE_S = 0.5
REUSE_S = 30.0  # one probe serves the plans of the next half minute in this process


class Load(BaseModel):
    """The machine's load beside one process: what the neighbours used and what this process got."""

    neighbours: float = Field(ge=0, description="cores the other processes used (machine busy time minus ours)")
    share: float = Field(gt=0, description="cores this process got: its CPU seconds over wall seconds")
    threads: int = Field(default=1, gt=0, description="the threads that got ``share`` (a probe: 1)")
    cores: int = Field(gt=0, description="the machine's cores (os.cpu_count)")
    load1: float | None = Field(default=None, description="the 1-minute load average then (for people)")

    def describe(self) -> str:
        return f"load {self.neighbours:.1f} of {self.cores} cores"

    @property
    def stalled(self) -> bool:
        """Several threads beside busy neighbours: its speed per core is spin-waiting, not the machine's."""
        return self.threads > 1 and self.neighbours > STALL_NEIGHBOURS


def _efficiency(threads: int) -> float:
    return PARALLEL_EFFICIENCY if threads > 1 else 1.0


def cores_for(load: Load, threads: int) -> float:
    """Cores ``threads`` training threads would get under ``load``: the share measured for the threads
    it covers, and for more threads the cores neither the neighbours nor those use."""
    if threads <= load.threads:
        return load.share * threads / load.threads
    free = max(0.0, load.cores - load.neighbours - load.share)
    return load.share + min(threads - load.threads, free)


def threads_under(load: Load, fixed: int | None) -> int:
    """The torch threads a run would train on under ``load``: the fixed count, else ``threads.threads_for``."""
    return fixed or threads_for(load.neighbours, load.cores, current=load.cores)


def credited(threads_then: int, threads_now: int) -> int:
    """The threads a scaled estimate counts: no more than were measured. What a second thread adds to a
    model is not known until it is measured (1.9x for the library notes' small models; for SmolLM2-135M
    with LoRA, issue 31's idle 160 tokens/s is what one thread's core makes here), so an estimate never
    counts on it; the run's own first steps measure it (``planning.pace``)."""
    return min(threads_now, threads_then)


def speed_ratio(then: Load, threads_then: int, now: Load, threads_now: int) -> float:
    """How much faster a process trains now than it did when ``then`` was measured (<1: slower): the cores
    its credited threads would get over the cores it got, each at its thread count's parallel efficiency."""
    before = then.share * _efficiency(threads_then)
    n = credited(threads_then, threads_now)
    after = cores_for(now, n) * _efficiency(n)
    return after / max(before, 1e-6)


def similar(ratio: float) -> bool:
    return 1 / SIMILAR <= ratio <= SIMILAR


def _probe(seconds: float) -> Load:
    """One thread spinning for ``seconds``: the share of a core it got, and the neighbours' use beside it."""
    mark, cpu0 = cpu_sample(), time.thread_time()
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass
    after, cpu1 = cpu_sample(), time.thread_time()
    share = (cpu1 - cpu0) / max(after[2] - mark[2], 1e-9)
    return Load(
        neighbours=round(neighbours_between(mark, after), 3),
        share=round(max(share, 0.01), 3),
        threads=1,
        cores=os.cpu_count() or 1,
        load1=round(os.getloadavg()[0], 2),
    )


_last: tuple[float, Load] | None = None


def load_now(max_age_s: float = REUSE_S) -> Load:
    """The machine's load now (a probe of ``PROBE_S``), reused for ``max_age_s`` within this process."""
    global _last
    if _last is None or time.monotonic() - _last[0] > max_age_s:
        _last = (time.monotonic(), _probe(PROBE_S))
    return _last[1]


def remember(load: Load) -> None:
    """Take ``load`` (a measurement's own, just made) as the load now for the next ``REUSE_S``: a plan made
    right after a measurement reads it as measured instead of probing and finding it differs by noise."""
    global _last
    _last = (time.monotonic(), load)


def during(mark: tuple[float, float, float], threads: int) -> Load:
    """The load over the work since ``mark`` (a ``cpu_sample()``) done by this process on ``threads`` threads."""
    now = cpu_sample()
    wall = max(now[2] - mark[2], 1e-9)
    return Load(
        neighbours=round(neighbours_between(mark, now), 3),
        share=round(max((now[1] - mark[1]) / wall, 0.01), 3),
        threads=threads,
        cores=os.cpu_count() or 1,
        load1=round(os.getloadavg()[0], 2),
    )
