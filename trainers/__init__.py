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
    "TrainConfig": "training.config",
    "ModelSpec": "training.config",
    "TokenizerConfig": "training.config",
    "LoraOptions": "training.config",
    "SFTOptions": "training.config",
    "DPOOptions": "training.config",
    "GRPOOptions": "training.config",
    "SpikeOptions": "training.config",
    "TrainReport": "training.results",
    "RestartProposal": "training.results",
    "EvalResult": "training.results",
    "train_tokenizer": "training.tokenizer",
    "load_tokenizer": "training.tokenizer",
    "build_model": "training.models",
    "load_model": "training.models",
    "train": "fit.loop",
    "exact_match": "evaluation.battery",
    "merge_adapters": "training.merge",
    "SpikeDetector": "training.spike",
    "heldout_loss": "evaluation.battery",
}

__all__ = [  # the names of _EXPORTS, written out so that linters and type checkers see the re-exports
    "DPOOptions",
    "EvalResult",
    "GRPOOptions",
    "LoraOptions",
    "ModelSpec",
    "RestartProposal",
    "SFTOptions",
    "SpikeDetector",
    "SpikeOptions",
    "TokenizerConfig",
    "TrainConfig",
    "TrainReport",
    "build_model",
    "exact_match",
    "heldout_loss",
    "load_model",
    "load_tokenizer",
    "merge_adapters",
    "train",
    "train_tokenizer",
]

if TYPE_CHECKING:  # pragma: no cover
    from trainteam.trainers.evaluation.battery import exact_match, heldout_loss
    from trainteam.trainers.fit.loop import train
    from trainteam.trainers.training.config import (
        DPOOptions,
        GRPOOptions,
        LoraOptions,
        ModelSpec,
        SFTOptions,
        SpikeOptions,
        TokenizerConfig,
        TrainConfig,
    )
    from trainteam.trainers.training.merge import merge_adapters
    from trainteam.trainers.training.models import build_model, load_model
    from trainteam.trainers.training.results import EvalResult, RestartProposal, TrainReport
    from trainteam.trainers.training.spike import SpikeDetector
    from trainteam.trainers.training.tokenizer import load_tokenizer, train_tokenizer


def __getattr__(name: str):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(f"module 'trainteam.trainers' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"trainteam.trainers.{mod}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
