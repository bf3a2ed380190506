"""The generation length of a run's answer checks, sized once per held-out set and tokenizer.

The judge's exact match and format adherence, the recipe search's scorer, GRPO's completions and
DPO's pairs from the model's own answers all ask ``eval_budget`` (``trainers.answer_length``): the
length the task or the stage's battery sets, refused when shorter than a reference answer, else the
longest held-out answer plus a margin.
"""

from __future__ import annotations

from pathlib import Path

from trainteam.contract.step_io import ToolContext
from trainteam.curation.demo import read_jsonl
from trainteam.trainers.evaluation.answer_length import GenerationBudget, size_generation
from trainteam.workflows.steps.corpus import stage_eval_set
from trainteam.workflows.task.curriculum import curriculum_from_task

_SIZED: dict[tuple, GenerationBudget] = {}


def set_length(ctx: ToolContext, stage) -> tuple[int | None, str]:
    """(the length a person set for ``stage``'s answers, or None, and the field that sets it): a curriculum
    stage's own ``battery.max_new_tokens``, else the task's ``eval.max_new_tokens``."""
    own = [s.name for s in ctx.task.curriculum or [] if s.battery is not None]
    if stage.name in own and "max_new_tokens" in stage.battery.model_fields_set:
        i = [s.name for s in ctx.task.curriculum or []].index(stage.name)
        return stage.battery.max_new_tokens, f"curriculum[{i}].battery.max_new_tokens"
    return ctx.task.eval.max_new_tokens, "eval.max_new_tokens"


def eval_budget(ctx: ToolContext, stage, tokenizer) -> GenerationBudget:
    """The generation length of ``stage``'s answer checks (a curriculum stage, or its name)."""
    if isinstance(stage, str):
        cur = curriculum_from_task(ctx.task)
        stage = cur.find(stage) or cur.stages[-1]
    value, field = set_length(ctx, stage)
    _, path, _ = stage_eval_set(ctx, stage)
    key = (
        str(path),
        Path(path).stat().st_mtime_ns,
        str(getattr(tokenizer, "name_or_path", "")),
        len(tokenizer),
        getattr(tokenizer, "chat_template", None),
        value,
        field,
    )
    if key not in _SIZED:
        _SIZED[key] = size_generation(
            tokenizer, read_jsonl(Path(path)), set_value=value, field=field, where=f"the held-out set {Path(path).name}"
        )
    return _SIZED[key]
