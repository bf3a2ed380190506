"""A change to a stage's training settings, as one typed value (``StageChange``), and the one function that
applies changes to a ``TrainConfig`` (``apply_changes``).

Every source that changes what a stage trains with says so as a ``StageChange``: the task's ``threads`` and
``distributed`` block (``task``), the engineer's per-stage overrides (``overrides``), the search's recipe
(``recipe``), a retry's plan after a failed gate (``retry``), the attempt's folder and rate factor
(``attempt``) and a method's completion length (``completion``). ``apply_changes`` applies them in that order
(``ORDER``, whatever order they are handed in) on the typed config and validates the result once, as a whole.

A field left None is unchanged. A field named in ``clears`` goes back to its default (``num_train_epochs`` and
``warmup_ratio``: none; ``max_steps``: the default, unused beside epochs). The attempt's ``lr_factor``
multiplies the rate the changes before it left. Where the result trains by epochs, its ``max_steps`` is the
one a change set (and then the config refuses the two together), else it is dropped: the epochs decide, as
in a dump of the config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, model_validator

from trainteam.trainers.training.config import GRPOOptions, Precision, Strategy, TrainConfig

Source = Literal["task", "overrides", "recipe", "retry", "attempt", "completion"]
ORDER: tuple[Source, ...] = ("task", "overrides", "recipe", "retry", "attempt", "completion")
Clearable = Literal["max_steps", "num_train_epochs", "warmup_ratio"]


class StageChange(BaseModel):
    """New values for a stage's TrainConfig fields from one source (None: unchanged), the fields it puts
    back to their defaults (``clears``) and the factor the attempt multiplies the rate by (``lr_factor``).
    Values are checked where the changes are applied, by the TrainConfig they make."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    source: Source
    max_steps: int | None = None
    num_train_epochs: float | None = None
    per_device_train_batch_size: int | None = None
    gradient_accumulation_steps: int | None = None
    learning_rate: float | None = None
    warmup_steps: int | None = None
    max_length: int | None = None
    precision: Precision | None = None
    gradient_checkpointing: bool | None = None
    strategy: Strategy | None = None
    num_nodes: int | None = None
    devices_per_node: int | None = None
    threads: int | None = None
    output_dir: Path | None = None
    resume: Literal["auto", "never"] | Path | None = None
    grpo: GRPOOptions | None = None
    lr_factor: float | None = None
    clears: frozenset[Clearable] = frozenset()

    @model_validator(mode="after")
    def _set_or_cleared(self) -> StageChange:
        both = sorted(f for f in self.clears if getattr(self, f, None) is not None)  # (warmup_ratio: cleared only)
        if both:
            raise ValueError(f"{both[0]}: a change either sets a field or clears it, not both")
        return self

    def _given(self) -> dict[str, Any]:
        """The TrainConfig fields this change gives a value, by name (the rate factor and ``clears`` apart)."""
        return {
            name: value
            for name in type(self).model_fields
            if name not in ("source", "lr_factor", "clears") and (value := getattr(self, name)) is not None
        }

    def applied(self, cfg: TrainConfig) -> TrainConfig:
        """``cfg`` with this change made, not yet validated (``apply_changes`` validates the result once)."""
        update: dict[str, Any] = {f: TrainConfig.model_fields[f].get_default() for f in self.clears}
        update.update(self._given())
        if self.lr_factor is not None:
            update["learning_rate"] = update.get("learning_rate", cfg.learning_rate) * self.lr_factor
        return cfg.model_copy(update=update)


def apply_changes(cfg: TrainConfig, *changes: StageChange | None) -> TrainConfig:
    """``cfg`` with ``changes`` applied in ``ORDER`` (None: no change from that source), validated once at the
    end (pydantic's ValidationError: a value TrainConfig refuses). No change: ``cfg`` itself."""
    given = sorted((c for c in changes if c is not None), key=lambda c: ORDER.index(c.source))
    if not given:
        return cfg
    steps_set = False  # whether the last change to touch max_steps set it (not cleared it)
    for change in given:
        cfg = change.applied(cfg)
        if change.max_steps is not None or "max_steps" in change.clears:
            steps_set = change.max_steps is not None
    fields = {name: getattr(cfg, name) for name in TrainConfig.model_fields}
    if cfg.num_train_epochs is not None and not steps_set:
        del fields["max_steps"]  # the epochs decide: the steps a stage had are not kept beside them
    return TrainConfig.model_validate(fields)
