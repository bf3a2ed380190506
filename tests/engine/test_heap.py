"""Between steps the engine gives the heap back (``core.heap.give_back``): glibc otherwise keeps what a training
freed, and the next step's model lands on top of it. Measured in a fresh process so the figures are its own."""

from __future__ import annotations

import json
import subprocess
import sys

CHILD = """
import json, psutil
from trainteam.core import heap
rss = lambda: psutil.Process().memory_info().rss >> 20
start = rss()
kept = [bytearray(4000) for _ in range(100_000)]  # 400 MB in small blocks: on the heap, not mmap'd
held = rss()
del kept
freed = rss()
trimmed = heap.give_back()
print(json.dumps({"start": start, "held": held, "freed": freed, "after": rss(), "trimmed": trimmed}))
"""


def test_the_heap_a_step_freed_goes_back_to_the_os():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["held"] - got["start"] > 350, got  # the blocks were resident
    if not got["trimmed"]:  # a C library without malloc_trim: nothing to give back this way
        return
    assert got["freed"] - got["start"] > 300, got  # freed, but glibc kept them
    assert got["after"] - got["start"] < 100, got  # given back
