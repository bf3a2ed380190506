"""One stage through the run planner, with the fixes the planner itself points to.

The planner refuses a setting as impossible or wasteful and names the field. Some of
those have one obvious repair that the planner can confirm: a sequence longer than the
model's context is cut to the context; memory, precision and strategy refusals take
``recommend``'s choice (same global batch). A stage is runnable if it plans as given or
with those fixes; the fixes are returned so the engineer can pass them as overrides,
and the request plan can show them to a person before anything starts.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from pydantic import BaseModel, Field

from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
from trainteam.trainers.planning import PlanRefused, detect_hardware, plan, recommend
from trainteam.trainers.planning.rows import SAMPLE_ROWS, jsonl_row_tokens, row_tokens_bound

FIXABLE = ("max_steps", "per_device_batch_size", "grad_accum", "learning_rate", "precision",
           "gradient_checkpointing", "strategy", "seq_len")


class StageVerdict(BaseModel):
    stage: str
    runnable: bool
    refusals: list[dict[str, str]] = Field(default_factory=list)
    fixes: dict[str, Any] = Field(default_factory=dict)
    params: int = 0
    total_tokens: int = 0
    est_minutes: float = 0.0
    est_cost_usd: float = 0.0
    memory_gib: float = 0.0
    warnings: list[str] = Field(default_factory=list)


@lru_cache(maxsize=1)
def this_machine():
    return detect_hardware()


def plan_stage(task, stage: str, cfg, hardware=None) -> StageVerdict:
    """Plan ``cfg`` (the stage's TrainConfig) for ``task`` on ``hardware`` (default: this machine)."""
    hw = hardware or this_machine()
    vocab = task.model.vocab_size or task.tokenizer.vocab_size
    data = task.stage_data(stage)
    rows = data.n_train if getattr(data, "demo", None) else None
    per_row = row_tokens(data) if cfg.method == "sft" else None

    def attempt(c):
        return plan(c, task.model, hw, vocab_size=vocab, dataset_rows=rows, row_tokens=per_row, strict=True)

    fixes: dict[str, Any] = {}
    refusals: list[dict[str, str]] = []
    try:
        p = attempt(cfg)
    except PlanRefused as refused:
        refusals = [r.model_dump() for r in refused.refusals]
        if any(r.field == "seq_len" for r in refused.refusals) and task.model.path is None:
            fixes["seq_len"] = task.model.max_position_embeddings
        if any(r.field != "seq_len" for r in refused.refusals):
            try:
                rec = recommend(task.model, hw, base=cfg.model_copy(update=fixes), vocab_size=vocab, strict=False).config
            except PlanRefused:
                rec = None
            if rec is not None:
                fixes.update({k: getattr(rec, k) for k in FIXABLE if getattr(rec, k) != getattr(cfg, k)})
        if not fixes:
            return StageVerdict(stage=stage, runnable=False, refusals=refusals)
        try:
            p = attempt(cfg.model_copy(update=fixes))
        except PlanRefused as still:
            return StageVerdict(stage=stage, runnable=False, refusals=[r.model_dump() for r in still.refusals])
    return StageVerdict(stage=stage, runnable=True, refusals=refusals, fixes=fixes, params=p.params,
                        total_tokens=p.total_tokens, est_minutes=round(p.cost.hours * 60, 3),
                        est_cost_usd=round(p.cost.cost, 4), memory_gib=round(p.memory.total_gib, 3),
                        warnings=list(p.warnings))


def row_tokens(data) -> float | None:
    """The planner's bound on tokens per row for a task's data (demo: a generated sample)."""
    if getattr(data, "demo", None):
        rows, _ = generate_arithmetic(ArithmeticConfig(task=data.demo, max_operand=data.max_operand,
                                                       n_train=SAMPLE_ROWS, n_eval=0, seed=data.seed,
                                                       fixed_width=data.fixed_width))
        return row_tokens_bound(rows)
    return jsonl_row_tokens(data.path)
