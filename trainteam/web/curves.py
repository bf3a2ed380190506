"""A run's training curves as they grow: the ``log`` events training appends to each stage folder's
``run-history.jsonl`` (``trainers/telemetry.py`` ``Telemetry.on_log``; one line per logging step).

Each file is read incrementally (from where the last read stopped), so many viewers polling a
training run cost a ``stat`` and the new lines, not the whole history.
"""

from __future__ import annotations

import json
import math
import threading
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from trainteam.core.ids import check_run_id

METRICS = ("loss", "learning_rate", "reward", "grad_norm")
HISTORY = "run-history.jsonl"


class Series(BaseModel):
    folder: str  # the stage folder under checkpoints/<run>/ (pretrain-v1, sft-v1-restart1, ...)
    metric: str
    points: list[tuple[int, float]]


class RunCurves(BaseModel):
    run_id: str
    series: list[Series]
    points: int  # every point of every series: grows while the run trains


@dataclass
class _File:
    offset: int = 0
    size: int = -1
    by_metric: dict[str, dict[int, float]] = field(default_factory=dict)


class CurveReader:
    """Curves of the runs of one workspace, cached per file between reads."""

    def __init__(self, checkpoints: Path):
        self.checkpoints = checkpoints
        self._files: dict[Path, _File] = {}
        self._lock = threading.Lock()

    def read(self, run_id: str) -> RunCurves:
        folder = self.checkpoints / check_run_id(run_id)
        series: list[Series] = []
        for path in sorted(folder.glob(f"**/{HISTORY}")) if folder.is_dir() else []:
            with self._lock:
                cached = self._update(path)
                label = path.parent.relative_to(folder).as_posix()
                series += [Series(folder=label, metric=m, points=sorted(pts.items()))
                           for m, pts in sorted(cached.by_metric.items()) if pts]
        return RunCurves(run_id=run_id, series=series, points=sum(len(s.points) for s in series))

    def _update(self, path: Path) -> _File:
        cached = self._files.setdefault(path, _File())
        try:
            size = path.stat().st_size
        except OSError:
            return cached
        if size == cached.size:
            return cached
        if size < cached.offset:  # replaced: read again from the start
            cached.offset, cached.by_metric = 0, {}
        with path.open("rb") as fh:
            fh.seek(cached.offset)
            chunk = fh.read(size - cached.offset)
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next read
        cached.offset += len(complete)
        cached.size = cached.offset
        for line in complete.splitlines():
            _add(cached.by_metric, line)
        return cached


def _add(by_metric: dict[str, dict[int, float]], line: bytes) -> None:
    try:
        event = json.loads(line)
    except ValueError:
        return
    if not isinstance(event, dict) or event.get("event") != "log" or not isinstance(event.get("step"), int):
        return
    for metric in METRICS:
        value = event.get(metric)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            by_metric.setdefault(metric, {})[event["step"]] = float(value)
