"""Give the heap a finished step freed back to the operating system, and keep large blocks off it.

glibc keeps the memory that Python, torch and the tokenizers free on its heap for the next allocation; a training
leaves much of it behind. A dates run (LoRA SFT of SmolLM2-135M on a bf16 base) held 2,063 MiB after its train step
with no model or tensor alive, 895 MiB after ``malloc_trim(0)``; the evaluation that followed loaded its own model on
top of that and was the run's peak. Hand-written because no maintained library exposes glibc's ``malloc_trim``; a
C library without it (musl, macOS) has nothing to give back this way and is left alone.

Within a step, trimming cannot help: glibc maps a block of 128 KiB or more on its own and unmaps it when freed, but
raises that threshold to the largest mapped block freed so far (up to 32 MiB), so once a forward's first activations
are freed the later ones come from the heap, where what a step frees stays resident among the blocks still in use.
A reply run's RSS climbed from 2.1 to 2.95 GiB over the first 280 s of its recipe search, and the run peaked at
3,238 MiB; with the threshold fixed at 1 MiB (``map_large_blocks``) the same stretch held 1.6-2.2 GiB, with the
same losses, and the run peaked at 2,992 MiB; 4 MiB keeps that and costs no step time (docs/history.md "A forward
bounded by its activations").
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
from functools import lru_cache


@lru_cache(maxsize=2)
def _libc(symbol: str):
    """glibc's ``symbol`` (``malloc_trim``, ``mallopt``), or None where the C library has none."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        return getattr(ctypes.CDLL(name), symbol)
    except (OSError, AttributeError):
        return None


M_MMAP_THRESHOLD = -3  # mallopt's parameter (malloc.h)
LARGE_BLOCK = 4 << 20  # bytes from which a block gets its own mapping: at 1 MiB, dates steps took 8 % longer (a
# fresh mapping's pages are faulted in each time); at 4 MiB as long as glibc's default, the peak the same as at 1 MiB


@lru_cache(maxsize=1)
def map_large_blocks() -> bool:
    """From now on blocks of ``LARGE_BLOCK`` bytes or more are mapped on their own and unmapped when freed (a
    fixed threshold, which also stops glibc raising it); False where the C library has no ``mallopt``."""
    mallopt = _libc("mallopt")
    return mallopt is not None and bool(mallopt(M_MMAP_THRESHOLD, LARGE_BLOCK))


def give_back() -> bool:
    """Collect cycles, then return the heap's free pages to the OS; False where the C library cannot. Large
    blocks are kept off the heap from the first call on (``map_large_blocks``)."""
    map_large_blocks()
    gc.collect()
    trim = _libc("malloc_trim")
    if trim is None:
        return False
    trim(0)
    return True
