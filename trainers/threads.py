"""Torch CPU threads chosen by measurement while training, not guessed once.

On shared cores the best thread count flips with the neighbours' load: measured here,
2 threads ran ~3× slower than 1 when another job was busy and ~1.9× faster when the
machine was idle, and a 0.3 s load sample before training picked wrong often. So the
tuner trains a few steps at each candidate count (the first step after a switch pays
the thread pool's start-up and is not counted), keeps the faster by tokens per second
of step time — switching away from all cores only for a clear (>10 %) gain, since
batches of different lengths make single steps noisy — and probes again every
``every`` steps.
"""

from __future__ import annotations

import time

from transformers import TrainerCallback


class ThreadTuner(TrainerCallback):
    def __init__(self, candidates: list[int], probe_steps: int = 3, every: int = 100, margin: float = 0.10):
        self.candidates = sorted(set(candidates))
        self.probe_steps = probe_steps
        self.every = every
        self.margin = margin
        self.rates: dict[int, float] = {}
        self.history: list[dict] = []
        self._queue: list[int] = []
        self._probe: dict | None = None
        self._t0 = 0.0
        self._tok0 = 0
        self._chosen: int | None = None
        self._since = 0

    def _set(self, n: int) -> None:
        import torch

        torch.set_num_threads(n)

    def _start_probe(self) -> None:
        self._queue = list(self.candidates)
        self.rates = {}
        self._next_candidate()

    def _next_candidate(self) -> None:
        n = self._queue.pop(0)
        self._set(n)
        self._probe = {"threads": n, "steps": -1, "time": 0.0, "tokens": 0}  # step -1: warm-up, not counted

    def on_train_begin(self, args, state, control, **kwargs):
        # The first step pays one-off set-up costs: probing starts after it (see on_step_end).
        self._since = self.every - 1 if len(self.candidates) > 1 else 0

    def on_step_begin(self, args, state, control, **kwargs):
        self._t0 = time.perf_counter()
        self._tok0 = state.num_input_tokens_seen or 0

    def on_step_end(self, args, state, control, **kwargs):
        dt = time.perf_counter() - self._t0
        if self._probe is None:
            self._since += 1
            if self._since >= self.every and len(self.candidates) > 1:
                self._start_probe()
            return
        p = self._probe
        p["steps"] += 1
        if p["steps"] <= 0:
            return
        p["time"] += dt
        p["tokens"] += (state.num_input_tokens_seen or 0) - self._tok0
        # Without token counts (some trainers), steps per second decides.
        rate = (p["tokens"] or p["steps"]) / max(p["time"], 1e-9)
        # A candidate at under half the best rate after one counted step is dropped at once:
        # under contention 2 threads ran 10x slower here, and each probe step costs that much.
        hopeless = bool(self.rates) and rate < 0.5 * max(self.rates.values())
        if p["steps"] < self.probe_steps and not hopeless:
            return
        self.rates[p["threads"]] = rate
        if self._queue:
            self._next_candidate()
            return
        most = max(self.candidates)
        best = max(self.rates, key=self.rates.get)
        if best != most and self.rates[best] < (1 + self.margin) * self.rates[most]:
            best = most
        self._chosen = best
        self._set(best)
        self.history.append({"step": state.global_step, "rates": dict(self.rates), "chosen": best})
        self._probe, self._since = None, 0

    @property
    def chosen(self) -> int | None:
        return self._chosen
