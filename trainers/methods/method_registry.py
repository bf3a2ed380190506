"""The registry of training methods: one ``TrainingMethod`` per name of ``names.NAMES``, each read from
its own file of this folder (``grpo.py`` defines ``METHOD``). Ask it what a method is instead of naming
one: ``get_method(cfg.method).needs_rewards``, ``align_methods()``.

Adding a method is its file and its name in ``trainers/training/method_names.py``; another package adds one as a
file of its own and an entry point (``method_names.py``).
"""

from __future__ import annotations

import importlib

from trainteam.core.errors import BadInput
from trainteam.trainers.methods.base import TrainingMethod
from trainteam.trainers.training.config import SpikeOptions, SpikeSignal, TrainConfig
from trainteam.trainers.training.method_names import ADDED, BUILT_IN, NAMES
from trainteam.trainers.training.trainer_args import trl_args


def _load() -> dict[str, TrainingMethod]:
    found: dict[str, TrainingMethod] = {}
    for name in NAMES:
        if name in BUILT_IN:
            where, record = (
                f"trainers/methods/{name}.py: METHOD",
                importlib.import_module(f"{__package__}.{name}").METHOD,
            )
        else:
            where, record = f"entry point {name} = {ADDED[name].value}", ADDED[name].load()
        if not isinstance(record, TrainingMethod) or record.name != name:
            raise TypeError(f"{where} must be the TrainingMethod named {name!r}")
        found[name] = record
    return found


METHODS: dict[str, TrainingMethod] = _load()


def get_method(name: str) -> TrainingMethod:
    """The method called ``name``; BadInput naming the known ones otherwise."""
    try:
        return METHODS[name]
    except KeyError:
        raise BadInput(f"method: {name!r} is not one of {', '.join(METHODS)}") from None


def methods() -> list[TrainingMethod]:
    """Every method, in the order stages run."""
    return list(METHODS.values())


def train_methods() -> tuple[str, ...]:
    """The methods that train a model (pretrain, SFT): a task needs one before any align stage."""
    return tuple(m.name for m in METHODS.values() if m.kind == "train")


def align_methods() -> tuple[str, ...]:
    """The methods that align a trained model (preference, reward): post-training stages only."""
    return tuple(m.name for m in METHODS.values() if m.kind == "align")


def from_scratch_method() -> str:
    """The method that trains a model from random init: a task building its model from a config starts with it."""
    return next(m.name for m in METHODS.values() if m.from_scratch)


def fine_tune_method() -> str:
    """The method a local model is fine-tuned with when a request names none: the first training method that
    does not start from random init."""
    return next(m.name for m in METHODS.values() if m.kind == "train" and not m.from_scratch)


def rewarded_method() -> TrainingMethod:
    """The align method that learns from the task's answer checks (a bare "align" on a demo)."""
    return next(m for m in METHODS.values() if m.needs_rewards)


def sampling_method() -> TrainingMethod:
    """The method whose settings block holds the sampling knobs (generations, temperature, completion length)."""
    return next(m for m in METHODS.values() if m.generates)


def method_signals(method: str, options: SpikeOptions) -> list[SpikeSignal]:
    """What "diverging" looks like for ``method``: its record's signals (``options.signals`` overrides)."""
    if options.signals is not None:
        return list(options.signals)
    return get_method(method).watched(options.watch_grad_norm)


def config_class(name: str) -> type:
    """The TRL (transformers) config class the method's trainer takes."""
    return get_method(name).config_class()


def checked_trl(config: TrainConfig, where: str = "trl") -> dict:
    """The config's ``trl:`` block, checked against its method's TRL config class (``trainer_args.trl_args``)."""
    method = get_method(config.method)
    return trl_args(config, method.config_class(), where, method.trl_owned)
