"""``TrainingMethod``: what trainteam knows about one training method, in one record.

In TRL a method is a config class and a trainer; trainteam adds how its rows are read and shaped,
which stage it is (``train``: pretrain, SFT; ``align``: a trained model's preference or reward
stage), what diverging looks like in its logs, and the learning rate an align stage takes when its
block gives none. Each method's file builds one record (``METHOD``); ``method_registry`` holds them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from trainteam.curation.formats import PromptFormat
from trainteam.trainers.training.config import SpikeSignal, TrainConfig, loss_signals
from trainteam.trainers.training.stage_change import StageChange

StageRole = Literal["train", "align"]
# Tool calls' arguments and tool schemas differ from row to row: Arrow would merge them into one
# struct and fill every key a row lacks with None (``"execute": null`` in a call that never had it,
# ``"$defs": null`` in a schema), which the chat template then renders. ``use_json`` keeps such
# columns as JSON values, each row's own (datasets' ``Json`` feature).
MIXED = "use_json"


class Builder(Protocol):
    """Build the method's trainer (rows already read and checked) with the run's callbacks."""

    def __call__(
        self,
        config: TrainConfig,
        model: Any,
        tokenizer: Any,
        ds: Any,
        eval_ds: Any,
        out: Path,
        callbacks: list,
        reward_funcs: list | None = None,
    ) -> Any: ...


@dataclass(frozen=True)
class TrainingMethod:
    name: str
    kind: StageRole  # train: pretrain/SFT stages; align: a trained model's alignment stage (post-training only)
    trl_config: str  # "module.Class": the (TRL or transformers) config its trainer takes; imported when asked
    build: Builder
    shape: Callable[[TrainConfig, Any, Any], Any]  # (config, tokenizer, rows) -> the trainer's rows (a Dataset)
    columns: tuple[tuple[str, ...], ...]  # a row needs one of these sets of fields
    row_kinds: tuple[str, ...]  # the row shapes (curation.formats.row_kind) it trains on, for the pre-flight check
    # (tokenizer, rows, prompt format) -> each example's tokens as its trainer tokenizes it (the planner's count)
    row_tokens: Callable[[Any, list[dict], PromptFormat], list[int]]
    words: str  # the regular expression a plain-words request names it by
    spike_signals: tuple[SpikeSignal, ...] = ()  # what diverging looks like; () = the loss going up
    default_lr: tuple[float, float] | None = None  # (full, LoRA) rate of an align stage that gives none
    eval_kind: Literal["pretrain", "post_train"] = "post_train"  # the evaluation battery's stage kind
    needs_rewards: bool = False  # takes reward functions (the task's answer checks)
    generates: bool = False  # samples completions while training: its time is generation, not a step's tokens
    evaluates: bool = True  # the trainer's evaluate() on held-out rows after training
    holds_reference: Callable[[TrainConfig], bool] = field(default=lambda _cfg: False)  # a frozen reference copy
    # sequences of up to the row's tokens one row puts through a forward (DPO: chosen and rejected), for a
    # micro-batch bounded by tokens (training/micro_batch.py); None: rows interact inside a forward, never split
    sequences_per_row: int | None = 1
    # (config, tokens) -> the change that makes its sampled completions that long (None where the task set it)
    completion_changes: Callable[[TrainConfig, int], StageChange | None] | None = None
    # What its trainer does with a row's tokens (the planner's and curation's counts):
    cuts_rows: bool = False  # a row longer than max_length is cut there by the trainer (curation keeps it)
    row_sequences: int = 1  # the most sequences one row's counted tokens span (a preference pair: chosen and rejected)
    packs: Callable[[TrainConfig], bool] = field(default=lambda _cfg: False)  # rows packed into max_length windows
    # Where it stands in a run:
    from_scratch: bool = False  # trains a model from random init: a model built from its config starts with it
    searched: bool = False  # the recipe search chooses its learning rate and steps when its block gives neither
    calibrated: bool = False  # a step is its rows' forward and backward only: its pace stands in for a calibration
    pairs_from_answers: bool = False  # pair or chat rows become preference pairs from the model's own answers
    # Its MCP tool (``mcp_server/train_tools.py`` makes one per method): the name (``train_<name>`` when empty)
    # and the description a client reads.
    tool: str = ""
    tool_doc: str = ""
    # The TRL keys its own settings set (TRL's name -> the setting, or why trainteam sets it): refused in its
    # ``trl:`` block, naming the setting (the keys every method's settings set: ``key_aliases.OWNED``).
    trl_owned: Mapping[str, str] = field(default_factory=dict)

    @property
    def learns_answers(self) -> bool:
        """Learns the answer each row ends with (post-training); pretraining reads a conversation as text."""
        return self.eval_kind == "post_train"

    @property
    def tool_name(self) -> str:
        """Its MCP tool's name."""
        return self.tool or f"train_{self.name}"

    def config_class(self) -> type:
        """The TRL (transformers) config class, imported now (TRL is heavy)."""
        module, _, name = self.trl_config.rpartition(".")
        return getattr(importlib.import_module(module), name)

    def watched(self, watch_grad_norm: bool) -> list[SpikeSignal]:
        """The signals the spike monitor watches when the config names none."""
        return list(self.spike_signals) if self.spike_signals else loss_signals(watch_grad_norm)


def is_peft(model: Any) -> bool:
    """A model that already carries adapters (a PEFT model)."""
    return hasattr(model, "peft_config")


def text_lengths(tokenizer: Any, texts: Sequence[str]) -> list[int]:
    """Tokens of each text, without special tokens (the templates write their own)."""
    return [len(ids) for ids in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
