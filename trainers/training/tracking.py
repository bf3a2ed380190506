"""Experiment tracking by configuration, through transformers' own ``report_to`` integrations.

Every tracker writes offline by default: MLflow to a file store under the run folder,
TensorBoard event files under ``output_dir/tensorboard``, W&B in offline mode. The
trackers are an optional extra (``pip install 'trainteam[tracking]'``) because MLflow
alone brings ~20 packages; a tracker that is not installed is refused before any work.

MLflow: transformers' ``MLflowCallback`` reads ``MLFLOW_TRACKING_URI`` and
``MLFLOW_EXPERIMENT_NAME`` from the environment at train start, so the per-run store is
handed over there. MLflow ≥ 3.13 refuses file stores unless ``MLFLOW_ALLOW_FILE_STORE``
is set (it wants a database); a file store needs no server and no migration, which is
what an offline run wants, so trainteam opts in. A URI the user exported is kept (their
server, their choice); one trainteam set for an earlier run in this process is not,
or every later run would log into the first run's folder.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from trainteam.core.errors import BadInput

_PACKAGES = {"mlflow": ("mlflow",), "tensorboard": ("tensorboardX", "tensorboard"), "wandb": ("wandb",)}
_INSTALL = {"mlflow": "'trainteam[tracking]'", "tensorboard": "tensorboardX", "wandb": "wandb"}
_OURS: set[str] = set()  # MLFLOW_TRACKING_URI values trainteam itself set in this process


_DIRS = {"mlflow": "mlruns", "tensorboard": "tensorboard", "wandb": "wandb"}


def tracker_dir(tracker: str, output_dir: Path) -> Path:
    return Path(output_dir) / _DIRS[tracker]


def installed(tracker: str) -> bool:
    return any(importlib.util.find_spec(p) is not None for p in _PACKAGES[tracker])


def install_hint(tracker: str) -> str:
    return f"pip install {_INSTALL[tracker]}"


def mlflow_uri(output_dir: Path) -> str:
    """The run's local MLflow file store: ``file:`` URI of ``output_dir/mlruns``."""
    return tracker_dir("mlflow", output_dir).resolve().as_uri()


def tracking_args(tracker: str, output_dir: Path) -> dict:
    """``report_to``/``run_name`` for a TrainingArguments, with the tracker's store set up offline."""
    if tracker == "none":
        return {"report_to": "none"}
    if not installed(tracker):
        raise BadInput(f"tracker: {tracker} is not installed (pip install {_INSTALL[tracker]})")
    where = tracker_dir(tracker, output_dir)
    if tracker == "mlflow":
        current = os.environ.get("MLFLOW_TRACKING_URI")
        if not current or current in _OURS:
            uri = mlflow_uri(output_dir)
            _OURS.add(uri)
            os.environ["MLFLOW_TRACKING_URI"] = uri
        os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        os.environ.setdefault("MLFLOW_EXPERIMENT_NAME", "trainteam")
    elif tracker == "tensorboard":
        os.environ["TENSORBOARD_LOGGING_DIR"] = str(where)
    elif tracker == "wandb":
        os.environ.setdefault("WANDB_MODE", "offline")
        os.environ.setdefault("WANDB_DIR", str(where))
        where.mkdir(parents=True, exist_ok=True)
    return {"report_to": [tracker], "run_name": Path(output_dir).name}
