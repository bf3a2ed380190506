"""What a run checks before it is created: everything knowable from the task and this machine.

A bad value found inside a run costs a workspace entry, a failed run and often minutes of
work; found here it is one line naming the field or the file's row, and nothing is written.
``check_runnable`` (below; a run calls it before anything is stored) calls ``preflight`` after the task and
spec parsed:

- no field the run uses holds a secret (only the description's prose is masked);
- every persona's model setting (``TRAINTEAM_MODEL*``) names a model that can be built, whose endpoint
  answers a short request;
- every stage plans on this machine (the planner's refusals: memory, a model too large);
- the tracker each stage names is installed;
- each stage's ``trl:`` block holds fields (and values) of its method's TRL config, none that
  trainteam sets itself (``method_registry.checked_trl``);
- each stage's data reads (``trainteam.curation.rows``: every file, split and column mapping),
  to the last row, and each row has a shape its method trains on (its ``row_kinds``); the rows
  held out (``eval_path``, the data's eval split, or the seeded share ``corpus`` will hold
  out) carry a prompt and its reference answer where the stage's battery checks answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import islice

from trainteam.agents.providers import build_model, check_answers, choose_model
from trainteam.contract.redaction import redacted_task
from trainteam.contract.train_task import DataSpec, TrainTask
from trainteam.core.errors import BadInput
from trainteam.curation.rows import Row, iter_rows
from trainteam.curation.splits import Part, held_out, plan_splits
from trainteam.trainers.methods.method_registry import checked_trl, get_method
from trainteam.trainers.training.tracking import install_hint, installed
from trainteam.workflows.engine.spec import PERSONAS, WorkflowSpec
from trainteam.workflows.task.curriculum import curriculum_from_task
from trainteam.workflows.task.eval_plan import planned_length
from trainteam.workflows.task.stage_plan import plan_stage, task_machine


def preflight(task: TrainTask, source: str) -> None:
    redacted_task(task.model_dump(mode="json"), source)  # a key in a path or name: refused, not masked
    providers()
    _trackers(task, source)
    trl_blocks(task, source)
    for field, data, uses in _data_uses(task):
        check_data(data, uses, source, field)
    planned_length(task, source)  # a set eval.max_new_tokens shorter than a held-out answer is refused here
    _plans(task, source)


def providers() -> None:
    """Every persona's model setting builds, and the endpoint it talks to answers (one short request per
    endpoint, ``check_answers``): a typo in TRAINTEAM_MODEL or a server that is not up is refused here rather
    than in the first step that talks to a model, after the run was stored."""
    probed: set[tuple[str, str | None]] = set()
    for persona in PERSONAS:
        choice = choose_model(persona)
        if not choice.offline:
            model = build_model(choice)
            if (choice.model, choice.base_url) not in probed:
                probed.add((choice.model, choice.base_url))
                check_answers(choice, model)


def trl_blocks(task: TrainTask, source: str) -> None:
    """Each stage's ``trl:`` passthrough against its method's TRL config (imports TRL only when one is given)."""
    for i, stage in enumerate(task.stage_names()):
        cfg = task.train_config(stage)
        if cfg.trl:
            where = f"curriculum[{i}].training.trl" if task.curriculum is not None else f"training.{stage}.trl"
            try:
                checked_trl(cfg, where=where)
            except BadInput as exc:
                raise BadInput(f"{source}: {exc}") from None


def _trackers(task: TrainTask, source: str) -> None:
    for stage in task.stage_names():
        tracker = task.train_config(stage).tracker
        if tracker != "none" and not installed(tracker):
            raise BadInput(
                f"{source}: training.{stage}.tracker: {tracker} is not installed "
                f"({install_hint(tracker)}), or set tracker: none"
            )


def _plans(task: TrainTask, source: str) -> None:
    """The planner's refusals a stage cannot be repaired from (the engineer applies repairs)."""
    hw = task_machine(task)
    for stage in task.stage_names():
        cfg = task.train_config(stage)
        if task.distributed is None and (cfg.strategy != "single" or cfg.devices_per_node > 1 or cfg.num_nodes > 1):
            raise BadInput(
                f"{source}: training.{stage}.strategy: {cfg.strategy} over {cfg.num_nodes * cfg.devices_per_node} "
                "processes is launched by the task's distributed block (distributed: {strategy: ddp, "
                "num_processes: 2}); remove strategy, devices_per_node and num_nodes here"
            )
        data = task.stage_data(stage)
        batch = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
        if data.demo is not None and get_method(cfg.method).kind == "train" and batch > data.n_train:
            raise BadInput(
                f"{source}: training.{stage}.per_device_train_batch_size: a batch of {batch} rows is more "
                f"than the {data.n_train} training rows"
            )
        verdict = plan_stage(task, stage, cfg, hw)
        if not verdict.runnable:
            raise BadInput(f"{source}: {refusal_line(stage, verdict.refusals)}")


def refusal_line(stage: str, refusals: list[dict[str, str]]) -> str:
    """The planner's refusals of a stage as one line: each names the field to change, as the task writes it
    (``training.<stage>.<field>``, or the task's ``model``), and a memory refusal says how it was estimated."""
    if not refusals:
        return f"training.{stage}: the planner refused it"
    why = "; ".join(
        f"training.{stage}{': ' if r['field'] == 'model' else '.'}{r['field']}: {r['reason']}" for r in refusals
    )
    if any("GiB" in r["reason"] for r in refusals):
        why += (
            " (the planner's memory estimate: weights, gradients, optimizer states and activations counted "
            "in closed form for this model's shape, trainers/planning/estimate.py)"
        )
    return why


# -- data ------------------------------------------------------------------------------------

ANSWER_KINDS = ("pair", "chat")  # a prompt and its reference answer: what exact match and the reliability checks read


@dataclass(frozen=True)
class Use:
    """A stage reading a DataSpec: the method its rows train, whether its battery checks answers."""

    stage: str
    method: str
    answers: bool


def _data_uses(task: TrainTask) -> list[tuple[str, DataSpec, list[Use]]]:
    """Each distinct DataSpec of the task (its field name, e.g. ``curriculum[1].data``) with the stages reading it."""
    own = {s.name: i for i, s in enumerate(task.curriculum or []) if s.data is not None}
    groups: dict[str, tuple[str, DataSpec, list[Use]]] = {}
    for st in curriculum_from_task(task).stages:
        data = task.stage_data(st.name)
        if data.path is None:
            continue
        field = f"curriculum[{own[st.name]}].data" if st.name in own else "data"
        if st.method is None or st.battery is None:  # the stage's validators and curriculum_from_task fill both
            raise RuntimeError(f"stage {st.name!r}: no method or battery after curriculum_from_task")
        use = Use(st.name, st.method, bool(set(st.battery.metrics) - {"heldout_loss"}))
        groups.setdefault(data.model_dump_json(), (field, data, []))[2].append(use)
    return list(groups.values())


def check_data(data: DataSpec, uses: list[Use], source: str, field: str = "data") -> dict[str, int]:
    """Every row of a DataSpec's training and held-out parts reads and fits the stages that use it;
    one BadInput line (``task.yaml: data.path: train.parquet: row 12: column 'messages': ...``)
    otherwise. Returns the rows counted per part."""
    if data.path is None:  # _data_uses passes only the DataSpecs that name a file
        raise BadInput(f"{source}: {field}.path: give the training data's path")
    try:
        plan = plan_splits(data.path, data.eval_path, split=data.split, eval_split=data.eval_split)
    except BadInput as exc:
        raise BadInput(f"{source}: {field}.path: {exc}") from None
    answers = any(u.answers for u in uses)
    eval_field = f"{field}.eval_path" if data.eval_path is not None else f"{field}.path"
    held_bad: list[int] = []
    n_train = _check_part(plan.train, data, uses, f"{source}: {field}.path", None if plan.eval else held_bad)
    if plan.eval is not None:
        n_eval = _check_part(plan.eval, data, [Use("held-out rows", "eval", answers)], f"{source}: {eval_field}")
        return {"train": n_train, "eval": n_eval}
    try:
        held = held_out(n_train, data.eval_fraction, data.seed)
    except BadInput as exc:
        raise BadInput(f"{source}: {field}.path: {plan.train}: {exc}; give {field}.eval_path") from None
    bad = sorted(held.intersection(held_bad))
    if bad and answers:
        row = next(
            islice(
                iter_rows(
                    plan.train.path, columns=data.columns, split=plan.train.split, max_row_bytes=data.max_row_bytes
                ),
                bad[0],
                None,
            )
        )
        raise BadInput(
            f"{source}: {field}.path: {row.where}: held out for evaluation, "
            f"{_answer_problem(row)}; give {field}.eval_path"
        )
    return {"train": n_train - len(held), "eval": len(held)}


def _check_part(part: Part, data: DataSpec, uses: list[Use], prefix: str, no_answer: list[int] | None = None) -> int:
    """Read one part to its last row; ``no_answer`` collects the rows that could not be held out."""
    n = 0
    try:
        for n, row in enumerate(
            iter_rows(part.path, columns=data.columns, split=part.split, max_row_bytes=data.max_row_bytes), 1
        ):
            for use in uses:
                problem = (
                    _train_problem(row, use.method)
                    if use.method != "eval"
                    else (_answer_problem(row) if use.answers else None)
                )
                if problem:
                    raise BadInput(f"{row.where}: {problem}")
            if no_answer is not None and _answer_problem(row):
                no_answer.append(n - 1)
    except BadInput as exc:
        raise BadInput(f"{prefix}: {exc}") from None
    if n == 0:
        raise BadInput(f"{prefix}: {part}: no rows")
    return n


def _ends_with_answer(row: Row) -> str | None:
    if row.kind != "chat":
        return None
    last = row.record["messages"][-1]["role"]
    if last != "assistant":
        return f"column 'messages': the conversation ends with a {last} turn, not an assistant reply"
    return None


def _train_problem(row: Row, method: str) -> str | None:
    record = get_method(method)
    if row.kind not in record.row_kinds:
        return f"{method} trains on {', '.join(record.row_kinds)} rows; this row is {row.kind}"
    return _ends_with_answer(row) if record.learns_answers else None


def _answer_problem(row: Row) -> str | None:
    if row.kind not in ANSWER_KINDS:
        return (
            f"a held-out row needs a prompt and its reference answer (prompt/completion, or messages "
            f"ending with an assistant reply); this row is {row.kind}"
        )
    return _ends_with_answer(row)


def check_runnable(spec: WorkflowSpec, task: TrainTask, source: str) -> None:
    """Everything that can be known before a run starts is checked here, so a bad task
    file fails with one line and leaves the workspace untouched."""
    names = {s.name for s in spec.steps}
    for i, step in enumerate(task.require_approval):
        if step not in names:
            raise BadInput(
                f"{source}: require_approval[{i}]: unknown step {step!r} (steps: {', '.join(sorted(names))})"
            )
    if task.workflow != spec.name:
        raise BadInput(f"{source}: workflow: task is for {task.workflow!r}, not {spec.name!r}")
    preflight(task, source)
