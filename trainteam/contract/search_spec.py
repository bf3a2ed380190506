"""What the training engineer's recipe search may choose, as a task says it (``search:``).

A stage whose training block gives neither a learning rate nor a length (``max_steps`` or
``num_train_epochs``) has no recipe: the engineer finds one (``trainers/search/recipe_search.py``)
before training it, spending at most ``budget_fraction`` of the run's time on probes.
``search: true`` searches whatever a stage leaves out, even beside given settings;
``search: false`` keeps the library defaults. Which settings of which stage are searched is
worked out once, from what the task file (or the parsed request) wrote, and carried in
``stages``: the engine hands every later step a full dump of the task, where every field
looks given, so it is never re-derived from a dump.

Searched: pretrain and SFT stages. The probes are ranked at each rung by the stage's gate metric
where it separates them (exact match after pre-training, or what the task's gate names), else by
held-out loss, on a slice of the training rows (``trainers/search/recipe_search.py``). A DPO or GRPO stage
without a learning rate takes its method's default (its record's ``default_lr``), and says so.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from trainteam.trainers.methods.method_registry import METHODS, get_method
from trainteam.trainers.training.key_aliases import EARLIER

SEARCHABLE = ("learning_rate", "max_steps", "per_device_train_batch_size")


class SearchSpec(BaseModel):
    """The recipe search's switch and share of the budget (``search:`` in a task)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool | None = Field(
        default=None,
        description="None: search each pretrain/SFT stage whose block gives "
        "neither learning_rate nor max_steps/num_train_epochs; true: search whatever a stage "
        "does not give; false: never (the library defaults)",
    )
    budget_fraction: float = Field(
        default=0.25, gt=0, le=0.5, description="share of the time budget the probes may use"
    )
    trials: int = Field(
        default=6,
        ge=2,
        le=64,
        description="learning rates tried (log-spaced over a prior's range, "
        "widened past an edge the best probe sits at), pruned by successive halving",
    )
    max_epochs: float = Field(
        default=3.0,
        gt=0,
        le=1000,
        description="a searched length of a model folder's "
        "fine-tune trains at most this many passes over the rows; a model built from scratch "
        "trains for what its share of the budget affords",
    )
    stages: dict[str, list[str]] | None = Field(
        default=None, description="filled when the task is read: stage -> the settings the engineer chooses"
    )
    align_lr: dict[str, float] = Field(
        default_factory=dict,
        description="filled when the task is read: a DPO/GRPO "
        "stage that gave no learning rate -> the method's default it trains at",
    )

    @field_validator("stages")
    @classmethod
    def _trl_names(cls, v: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        """A run stored before the settings took TRL's names reads them under those names."""
        return None if v is None else {stage: [EARLIER.get(s, s) for s in names] for stage, names in v.items()}


def searched_settings(spec: SearchSpec, given: dict[str, set[str]], methods: dict[str, str]) -> dict[str, list[str]]:
    """Stage -> the settings to search, from what each stage's block gave (``given``) and its method."""
    if spec.enabled is False:
        return {}
    out: dict[str, list[str]] = {}
    for stage, method in methods.items():
        if not get_method(method).searched:
            continue
        wrote = given.get(stage, set())
        length = bool(wrote & {"max_steps", "num_train_epochs"})
        if spec.enabled is None and ("learning_rate" in wrote or length):
            continue
        left = [s for s in SEARCHABLE if s not in wrote and not (s == "max_steps" and length)]
        if left:
            out[stage] = left
    return out


def align_default_lr(method: str, lora: bool) -> float | None:
    """The learning rate an align stage (DPO, GRPO) without one trains at: its method's ``default_lr``
    (``trainers/methods/``; None for a method without one)."""
    rates = get_method(method).default_lr if method in METHODS else None
    return None if rates is None else rates[1 if lora else 0]
