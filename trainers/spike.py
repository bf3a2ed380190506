"""Loss-spike monitor: stop cleanly on a spike and propose a restart for a person to approve.

Defaults follow OLMo: a value beyond ``sigma`` (6) standard deviations of the last
``window`` (128) observations counts, after ``warmup_steps`` (64); a non-finite loss or
grad-norm always counts. The spiking update is already applied when the loss shows it,
so the proposal rolls back to the last checkpoint *before* the spike.
"""

from __future__ import annotations

import math
from collections import deque
from pathlib import Path

from transformers import TrainerCallback

from trainteam.trainers.checkpoints import checkpoint_step, complete_checkpoints
from trainteam.trainers.config import SpikeOptions
from trainteam.trainers.reports import RestartProposal


class SpikeDetector:
    """Rolling z-score of loss and grad-norm; pure Python so it is testable without training."""

    def __init__(self, options: SpikeOptions):
        self.opt = options
        self.hist: dict[str, deque[float]] = {"loss": deque(maxlen=options.window), "grad_norm": deque(maxlen=options.window)}
        self.seen = 0

    def observe(self, step: int, loss: float | None, grad_norm: float | None = None) -> dict | None:
        """Evidence of a spike at ``step``, or None. Spiking values never enter the window."""
        for name, v in (("loss", loss), ("grad_norm", grad_norm)):  # non-finite always counts
            if v is not None and not math.isfinite(v):
                return {"step": step, "metric": name, "value": repr(v), "rule": "non-finite"}
        values = {"loss": loss}
        if self.opt.watch_grad_norm:
            values["grad_norm"] = grad_norm
        self.seen += 1
        if self.seen > self.opt.warmup_steps:
            for name, v in values.items():
                h = self.hist[name]
                if v is None or len(h) < 4:
                    continue
                mean = sum(h) / len(h)
                std = math.sqrt(sum((x - mean) ** 2 for x in h) / (len(h) - 1))
                if v > mean + self.opt.sigma * max(std, 1e-8):
                    return {
                        "step": step, "metric": name, "value": v, "window_mean": mean, "window_std": std,
                        "z": (v - mean) / max(std, 1e-8), "sigma": self.opt.sigma, "window": len(h),
                        "rule": f">{self.opt.sigma}σ",
                    }
        for name, v in values.items():
            if v is not None:
                self.hist[name].append(float(v))
        return None


def make_proposal(evidence: dict, output_dir: Path, *, skip_batches: int | None = None, lr_scale: float = 0.5) -> RestartProposal | None:
    """Roll back to the newest complete checkpoint that cannot hold the spiking update.

    The loss logged at step s comes from the weights after update s-1, so a blow-up
    seen at s may already be in checkpoint s-1: only checkpoints up to s-2 are trusted.
    """
    step = int(evidence["step"])
    before = [c for c in complete_checkpoints(output_dir) if (checkpoint_step(c) or 0) <= step - 2]
    if not before:
        return None
    ckpt = before[-1]
    ck_step = checkpoint_step(ckpt) or 0
    # Skip the batches between the checkpoint and the spike plus the spiking one itself.
    skip = skip_batches if skip_batches is not None else max(1, step - ck_step)
    why = f"{evidence['metric']} {evidence['value']} at step {step} ({evidence['rule']})"
    return RestartProposal(
        spike_step=step, rollback_checkpoint=ckpt, skip_batches=skip, lr_scale=lr_scale,
        reason=f"loss spike: {why}; roll back to step {ck_step}, skip {skip} batches, scale LR by {lr_scale}",
        evidence=evidence,
    )


class SpikeMonitor(TrainerCallback):
    """Watches every log; on a spike it asks the Trainer to save and stop."""

    def __init__(self, options: SpikeOptions):
        self.detector = SpikeDetector(options)
        self.evidence: dict | None = None

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or self.evidence is not None or "loss" not in logs:
            return control
        ev = self.detector.observe(state.global_step, logs.get("loss"), logs.get("grad_norm"))
        if ev is not None:
            ev["learning_rate"] = logs.get("learning_rate")
            self.evidence = ev
            control.should_save = True
            control.should_training_stop = True
        return control
