"""CPU seconds, for the tests that guard against work that blows up (a pattern that backtracks, a YAML bomb).

Wall time counts whatever else the machine runs: on a busy 2-core machine a 0.1 s parse can take 2 s. The CPU
time this process (and the children it waited for) spent does not, so a bound on it fails only when the
work itself grew. Imported by name (tests/conftest.py puts this folder on sys.path).
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager


def _children() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


class Spent:
    seconds: float = 0.0


@contextmanager
def cpu_seconds() -> Iterator[Spent]:
    """``with cpu_seconds() as spent: ...`` then ``spent.seconds``: CPU time of this process and of the child
    processes it waited for inside the block."""
    spent = Spent()
    own, kids = time.process_time(), _children()
    try:
        yield spent
    finally:
        spent.seconds = (time.process_time() - own) + (_children() - kids)
