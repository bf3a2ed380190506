"""The answer checks' generation length, known before a run exists when the task names its model.

``trainers.answer_length`` sizes the length from the held-out answers with the model's tokenizer. A task
that continues a local model (``model.path``) has that tokenizer before anything runs, so ``preflight``
refuses a set ``eval.max_new_tokens`` shorter than some held-out answer (one line naming the field and the
row) and ``trainteam validate`` prints the length. A model built from its config has no tokenizer yet: the
train step sizes (and checks) it as soon as the run's tokenizer exists, before any training.
"""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

from trainteam.contract.train_task import DataSpec, TrainTask
from trainteam.core.errors import BadInput
from trainteam.curation.rows import iter_rows
from trainteam.curation.splits import held_out, plan_splits, seal_test
from trainteam.trainers.evaluation.answer_length import GenerationBudget, size_generation
from trainteam.trainers.evaluation.answer_style import AnswerStyle, answer_style
from trainteam.trainers.evaluation.stage_gate import gate_text
from trainteam.trainers.planning.tokens import model_tokenizer
from trainteam.workflows.task.curriculum import curriculum_from_task

MAX_ROWS = 5000  # held-out rows read to size the length (a longer set: its first rows)


def held_out_records(data: DataSpec) -> Iterator[dict]:
    """The canonical held-out rows of a user's data, as ``prepare_corpus`` will hold them out."""
    assert data.path is not None  # asked of a task with its data's path (planned_length)
    plan = plan_splits(data.path, data.eval_path, split=data.split, eval_split=data.eval_split)
    if plan.eval is not None:
        for row in iter_rows(
            plan.eval.path, columns=data.columns, split=plan.eval.split, max_row_bytes=data.max_row_bytes
        ):
            yield row.record
        return
    rows = [
        row.record
        for row in iter_rows(
            plan.train.path, columns=data.columns, split=plan.train.split, max_row_bytes=data.max_row_bytes
        )
    ]
    held = held_out(len(rows), data.eval_fraction, data.seed)
    yield from (rows[i] for i in sorted(held))


def planned_length(task: TrainTask, source: str) -> GenerationBudget | None:
    """The length the run's answer checks will use, when the model's tokenizer and the data are the user's
    (None otherwise: sized in the run); ``BadInput`` for a set length shorter than a held-out answer."""
    if task.model.path is None or task.data.path is None:
        return None
    tokenizer = model_tokenizer(str(task.model.path), task.model.chat_template)
    where = f"{task.data.eval_path.name if task.data.eval_path else task.data.path.name} (held out)"
    try:
        return size_generation(
            tokenizer,
            list(islice(held_out_records(task.data), MAX_ROWS)),
            set_value=task.eval.max_new_tokens,
            where=where,
        )
    except BadInput as exc:
        raise BadInput(f"{source}: {exc}") from None


def planned_style(task: TrainTask) -> AnswerStyle | None:
    """The answers' style the run will judge by (``answer_style`` on the dev part of the held-out rows, as
    ``prepare_corpus`` will cut it); None for the bundled demo (its numbers are exact by construction)."""
    if task.data.path is None:
        return None
    rows = list(islice(held_out_records(task.data), MAX_ROWS))
    dev = [rows[i] for i in seal_test(len(rows), task.data.seed).dev]
    return answer_style(dev, task.answer, task.eval.metrics)


def planned_gates(task: TrainTask, style: AnswerStyle | None) -> dict[str, str]:
    """Stage -> the gate it will meet, in words (``stage_gate.gate_text``): what plan, validate and
    ``submit --plan-only`` print instead of "none" when the task names no rule."""
    stages = curriculum_from_task(task).stages
    return {s.name: gate_text(s.kind or "post_train", s.method or "", list(s.gates), style) for s in stages}
