"""What a run checks before it is created: everything knowable from the task and this machine.

A bad value found inside a run costs a workspace entry, a failed run and often minutes of
work; found here it is one line naming the field or the file's row, and nothing is written.
``check_runnable`` (workflows/runner.py) calls ``preflight`` after the task and spec parsed:

- no field the run uses holds a secret (only the description's prose is masked);
- every persona's model setting (``TRAINTEAM_MODEL*``) names a model that can be built;
- every stage plans on this machine (the planner's refusals: memory, a model too large);
- the tracker each stage names is installed;
- each data file is JSON Lines whose rows carry what the stage reads (``prompt`` and
  ``completion`` strings, or ``text`` for pretraining), checked to the last row.
"""

from __future__ import annotations

from pathlib import Path

from trainteam.agents.providers import build_model, choose_model
from trainteam.agents.redact import redacted_task
from trainteam.core.errors import BadInput
from trainteam.curation.jsonl import iter_jsonl
from trainteam.trainers.tracking import install_hint, installed
from trainteam.workflows.spec import PERSONAS
from trainteam.workflows.stageplan import plan_stage, this_machine
from trainteam.workflows.task import DataSpec, TrainTask

PAIR = ("prompt", "completion")


def preflight(task: TrainTask, source: str) -> None:
    redacted_task(task.model_dump(mode="json"), source)  # a key in a path or name: refused, not masked
    providers()
    _trackers(task, source)
    _plans(task, source)
    checked: set[tuple[Path, bool]] = set()
    for stage in task.stage_names():
        data = task.stage_data(stage)
        pretrain_only = task.train_config(stage).method == "pretrain"
        for path, pair in _files(data, pretrain_only):
            if (path, pair) not in checked:
                check_rows(path, need_pair=pair, source=source)
                checked.add((path, pair))


def providers() -> None:
    """Every persona's model setting builds (no connection is made): a typo in TRAINTEAM_MODEL
    is a person's input, refused here rather than in the first step that talks to a model."""
    for persona in PERSONAS:
        choice = choose_model(persona)
        if not choice.offline:
            build_model(choice)


def _trackers(task: TrainTask, source: str) -> None:
    for stage in task.stage_names():
        tracker = task.train_config(stage).tracker
        if tracker != "none" and not installed(tracker):
            raise BadInput(f"{source}: training.{stage}.tracker: {tracker} is not installed "
                           f"({install_hint(tracker)}), or set tracker: none")


def _plans(task: TrainTask, source: str) -> None:
    """The planner's refusals a stage cannot be repaired from (the engineer applies repairs)."""
    hw = this_machine()
    for stage in task.stage_names():
        cfg = task.train_config(stage)
        data = task.stage_data(stage)
        batch = cfg.per_device_batch_size * cfg.grad_accum
        if data.demo is not None and cfg.method in ("pretrain", "sft") and batch > data.n_train:
            raise BadInput(f"{source}: training.{stage}.per_device_batch_size: a batch of {batch} rows is more "
                           f"than the {data.n_train} training rows")
        verdict = plan_stage(task, stage, cfg, hw)
        if not verdict.runnable:
            why = "; ".join(f"{r['field']}: {r['reason']}" for r in verdict.refusals) or "the planner refused it"
            raise BadInput(f"{source}: training.{stage}: {why}")


def _files(data: DataSpec, pretrain_only: bool) -> list[tuple[Path, bool]]:
    if data.path is None:
        return []
    return [(Path(data.path), not pretrain_only), (Path(data.eval_path), True)]


def check_rows(path: Path, *, need_pair: bool, source: str) -> int:
    """Every row of a JSONL data file has the fields training reads; BadInput naming file:line."""
    line = [0]
    n = 0
    try:
        for row in iter_jsonl(path, on_line=lambda i: line.__setitem__(0, i)):
            _check_row(row, path, line[0], need_pair)
            n += 1
    except BadInput as exc:
        raise BadInput(f"{source}: {exc}") from None
    if n == 0:
        raise BadInput(f"{source}: {path}: no rows")
    return n


def _check_row(row: dict, path: Path, line: int, need_pair: bool) -> None:
    if all(isinstance(row.get(k), str) for k in PAIR):
        return
    if not need_pair and isinstance(row.get("text"), str) and row["text"]:
        return
    wanted = "'prompt' and 'completion' strings" + ("" if need_pair else ", or a 'text' string")
    bad = [k for k in PAIR if k in row and not isinstance(row[k], str)]
    got = f"{bad[0]!r} is {type(row[bad[0]]).__name__}" if bad else f"fields {sorted(row)[:6]}"
    raise BadInput(f"{path}:{line}: expected {wanted}; {got}")
