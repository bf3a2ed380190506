"""A run's training curves as they grow: the ``log`` events training appends to each stage folder's
``run-history.jsonl`` (``trainers/training/telemetry.py`` ``Telemetry.on_log``; one line per logging step).

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
    offset: int = 0  # in a live update: how many points of this series came before these


class RunCurves(BaseModel):
    run_id: str
    series: list[Series]
    points: int  # every point of every series: grows while the run trains

    def after(self, sent: dict[tuple[str, str], int]) -> RunCurves:
        """Only the points past ``sent`` (points already sent, by (folder, metric)), each series with
        its ``offset``; ``sent`` is brought up to date. What the live stream sends after its first event."""
        out = []
        for s in self.series:
            key = (s.folder, s.metric)
            done = sent.get(key, 0)
            if len(s.points) > done:
                out.append(
                    Series.model_construct(folder=s.folder, metric=s.metric, points=s.points[done:], offset=done)
                )
                sent[key] = len(s.points)
        return RunCurves.model_construct(run_id=self.run_id, series=out, points=self.points)


@dataclass
class _File:
    offset: int = 0
    size: int = -1
    by_metric: dict[str, dict[int, float]] = field(default_factory=dict)
    series: list[tuple[str, list[tuple[int, float]]]] | None = None  # sorted, until the file grows again


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
                if cached.series is None:
                    cached.series = [(m, sorted(pts.items())) for m, pts in sorted(cached.by_metric.items()) if pts]
                series += [Series.model_construct(folder=label, metric=m, points=pts) for m, pts in cached.series]
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
            cached.offset, cached.by_metric, cached.series = 0, {}, None
        with path.open("rb") as fh:
            fh.seek(cached.offset)
            chunk = fh.read(size - cached.offset)
        complete = chunk[: chunk.rfind(b"\n") + 1]  # a line still being written waits for the next read
        cached.offset += len(complete)
        cached.size = cached.offset
        for line in complete.splitlines():
            _add(cached.by_metric, line)
        if complete:
            cached.series = None
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
