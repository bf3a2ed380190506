"""Experiment tracking by configuration, through transformers' own ``report_to`` integrations.

Every tracker writes offline by default: MLflow to a file store under the run folder,
TensorBoard event files under ``output_dir/tensorboard``, W&B in offline mode.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from trainteam.errors import BadInput

_PACKAGES = {"mlflow": ("mlflow",), "tensorboard": ("tensorboardX", "tensorboard"), "wandb": ("wandb",)}
_INSTALL = {"mlflow": "mlflow-skinny", "tensorboard": "tensorboardX", "wandb": "wandb"}


def tracker_dir(tracker: str, output_dir: Path) -> Path | None:
    return {"mlflow": Path(output_dir) / "mlruns", "tensorboard": Path(output_dir) / "tensorboard",
            "wandb": Path(output_dir) / "wandb"}.get(tracker)


def tracking_args(tracker: str, output_dir: Path) -> dict:
    """``report_to``/``run_name`` for a TrainingArguments, with the tracker's store set up offline."""
    if tracker == "none":
        return {"report_to": "none"}
    if not any(importlib.util.find_spec(p) for p in _PACKAGES[tracker]):
        raise BadInput(f"tracker: {tracker} is not installed (pip install {_INSTALL[tracker]})")
    where = tracker_dir(tracker, output_dir)
    if tracker == "mlflow":
        os.environ.setdefault("MLFLOW_TRACKING_URI", where.resolve().as_uri())
        os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", "trainteam")
    elif tracker == "tensorboard":
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(where)
    elif tracker == "wandb":
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_DIR", str(where))
        where.mkdir(parents=True, exist_ok=True)
    return {"report_to": [tracker], "run_name": Path(output_dir).name}
