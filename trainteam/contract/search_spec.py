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
without a learning rate takes its method's default (``ALIGN_DEFAULTS``), and says so.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

SEARCHABLE = ("learning_rate", "max_steps", "per_device_batch_size")
SEARCHED_METHODS = ("pretrain", "sft")
# What a DPO / GRPO stage trains at when its block names no learning rate: GRPO at 1e-5
# (benchmarks/align_gain.py from a 53.5 % SFT checkpoint: 1e-4 fell to 44 %, 1e-5 reached
# 65.5-68 %); DPO at 5e-6 full / 5e-5 with LoRA (TRL's DPO examples and docs use 5e-7..5e-6 on
# full models; LoRA adapters take ~10x).
ALIGN_DEFAULTS = {"grpo": {"full": 1e-5, "lora": 1e-5}, "dpo": {"full": 5e-6, "lora": 5e-5}}


class SearchSpec(BaseModel):
    """The recipe search's switch and share of the budget (``search:`` in a task)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    enabled: bool | None = Field(default=None, description="None: search each pretrain/SFT stage whose block gives "
                                 "neither learning_rate nor max_steps/num_train_epochs; true: search whatever a stage "
                                 "does not give; false: never (the library defaults)")
    budget_fraction: float = Field(default=0.25, gt=0, le=0.5, description="share of the time budget the probes may use")
    trials: int = Field(default=6, ge=2, le=64, description="learning rates tried (log-spaced over a prior's range, "
                        "widened past an edge the best probe sits at), pruned by successive halving")
    max_epochs: float = Field(default=3.0, gt=0, le=1000, description="a searched length of a model folder's "
                              "fine-tune trains at most this many passes over the rows; a model built from scratch "
                              "trains for what its share of the budget affords")
    stages: dict[str, list[str]] | None = Field(default=None, description="filled when the task is read: stage -> "
                                                "the settings the engineer chooses")
    align_lr: dict[str, float] = Field(default_factory=dict, description="filled when the task is read: a DPO/GRPO "
                                       "stage that gave no learning rate -> the method's default it trains at")


def searched_settings(spec: SearchSpec, given: dict[str, set[str]], methods: dict[str, str]) -> dict[str, list[str]]:
    """Stage -> the settings to search, from what each stage's block gave (``given``) and its method."""
    if spec.enabled is False:
        return {}
    out: dict[str, list[str]] = {}
    for stage, method in methods.items():
        if method not in SEARCHED_METHODS:
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
    """The learning rate a DPO / GRPO stage without one trains at (None for other methods)."""
    table = ALIGN_DEFAULTS.get(method)
    return None if table is None else table["lora" if lora else "full"]
