"""The training stack on transformers, TRL, PEFT and accelerate; imports no agents or workflows.

Importing this package is light (no torch): names resolve on first use (PEP 562).

    train_tokenizer(texts, TokenizerConfig, out_dir) -> Path      load_tokenizer(path) -> tokenizer
    build_model(ModelSpec, tokenizer) -> model                    load_model(path) -> model (adapter folders too)
    train(method, TrainConfig, model | Path, data, *, tokenizer, eval_data=None, callbacks=None,
          progress=True, apply_proposal=None, reward_funcs=None) -> TrainReport
    exact_match(model | Path, tokenizer, problems) -> EvalResult  heldout_loss(model, tokenizer, records) -> float
    merge_adapters([adapter dirs], out_dir, combination_type="ties") -> Path
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_EXPORTS = {
    "TrainConfig": "config", "ModelSpec": "config", "TokenizerConfig": "config", "LoraOptions": "config",
    "SFTOptions": "config", "DPOOptions": "config", "GRPOOptions": "config", "SpikeOptions": "config",
        "TrainReport": "results", "RestartProposal": "results", "EvalResult": "results",
    "train_tokenizer": "tokenizer", "load_tokenizer": "tokenizer",
    "build_model": "models", "load_model": "models",
    "train": "training",
    "exact_match": "eval_battery",
    "merge_adapters": "merge",
    "SpikeDetector": "spike", "heldout_loss": "eval_battery",
}

__all__ = sorted(_EXPORTS)

if TYPE_CHECKING:  # pragma: no cover
    from trainteam.trainers.training import train
    from trainteam.trainers.config import (DPOOptions, GRPOOptions, LoraOptions, ModelSpec, SFTOptions, SpikeOptions,
                                           TokenizerConfig, TrainConfig)
    from trainteam.trainers.eval_battery import exact_match, heldout_loss
    from trainteam.trainers.merge import merge_adapters
    from trainteam.trainers.models import build_model, load_model
    from trainteam.trainers.results import EvalResult, RestartProposal, TrainReport
    from trainteam.trainers.spike import SpikeDetector
    from trainteam.trainers.tokenizer import load_tokenizer, train_tokenizer


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'trainteam.trainers' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"trainteam.trainers.{mod}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
