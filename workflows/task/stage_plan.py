"""One stage through the run planner, with the fixes the planner itself points to.

The planner refuses a setting as impossible or wasteful and names the field. Some of
those have one obvious repair that the planner can confirm: a sequence longer than the
model's context is cut to the context; memory, precision and strategy refusals take
``recommend``'s choice (same global batch). A stage is runnable if it plans as given or
with those fixes; the fixes are returned so the engineer can pass them as overrides,
and the request plan can show them to a person before anything starts.

The planner is given the stage's data as the trainer will see it (``data_tokens``): how many
training examples (for ``num_train_epochs`` and the epochs reported) and their tokens,
counted with the model's own tokenizer on a sample when the task fine-tunes a local model
(else bounded by bytes: the run trains its tokenizer later). Its throughput is the one
measured on this machine for this model and shape (``trainers.planning.calibrate``) when a
measurement is stored (fitted to the load now), or measured now with ``measure=True``
(``trainteam validate``); otherwise the FLOP-based guess. The verdict says which
(``estimate_note``), and its pace (``step_seconds``) is what a refusal turns into steps.

A stage whose length is the recipe search's to choose (``search.stages``) carries a placeholder
``max_steps`` until the search sets it; where that placeholder would not fit the stage's share
of the budget, the stage is planned at the length the share affords (``length_note``), as the
search will set it (``workflows/steps/recipe.py``), never refused for a number nobody chose.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from trainteam.core.errors import BadInput
from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
from trainteam.curation.rows import read_rows
from trainteam.curation.sources import iter_items
from trainteam.curation.splits import held_out, plan_splits
from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.planning import PlanRefused, detect_hardware, plan, recommend
from trainteam.trainers.planning.calibrate import Calibration, calibrate, lookup
from trainteam.trainers.planning.tokens import SAMPLE_ROWS, RowTokens, bytes_bound, count_tokens, model_tokenizer
from trainteam.trainers.search.recipe_search import default_batch, final_steps

FIXABLE = (
    "max_steps",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "learning_rate",
    "precision",
    "gradient_checkpointing",
    "strategy",
    "max_length",
)


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
    max_steps: int = 0
    examples: int | None = Field(default=None, description="training examples the planner counted (epochs, steps)")
    row_tokens: float | None = Field(default=None, description="mean tokens per training example")
    row_tokens_source: str | None = Field(
        default=None, description="tokenizer (counted on a sample) or bytes (a bound)"
    )
    longest_row: int | None = None
    tokens_per_second: float = 0.0
    throughput_source: str = "assumed"
    estimate_note: str = Field(
        default="",
        description="how the time estimate was made: a measurement (when, at "
        "what load, scaled or not) or the FLOP guess",
    )
    step_seconds: float = Field(default=0.0, description="the estimate's seconds per optimizer step")
    length_note: str | None = Field(
        default=None, description="a searched length planned at what the budget affords instead of its placeholder"
    )
    reasons: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


@lru_cache(maxsize=8)
def this_machine(processes: int | None = None):
    return detect_hardware(processes=processes)


def task_machine(task):
    """This machine as the task's stages train on it: with a ``distributed:`` block on a CPU, each
    launched process is a device with its share of RAM and cores; over many machines, as many nodes;
    with ``budget.max_memory_gib``, each device has at most that much memory."""
    dist = getattr(task, "distributed", None)
    hw = this_machine() if dist is None else this_machine(dist.num_processes // dist.num_machines)
    if dist is not None and dist.num_machines > 1:
        hw = hw.model_copy(update={"nodes": dist.num_machines, "fabric": "ethernet"})
    cap = getattr(getattr(task, "budget", None), "max_memory_gib", None)
    if cap is not None and cap < hw.device_memory_gib:
        hw = hw.model_copy(update={"device_memory_gib": cap, "memory_budget": True})
    return hw


def plan_stage(task, stage: str, cfg, hardware=None, *, measure: bool = False) -> StageVerdict:
    """Plan ``cfg`` (the stage's TrainConfig) for ``task`` on ``hardware`` (default: this machine).
    ``measure``: calibrate the throughput now when no measurement is stored (loads the model)."""
    hw = hardware or task_machine(task)
    vocab = task.model.vocab_size or task.tokenizer.vocab_size
    counted = data_tokens(task, stage, cfg.method)

    measured: dict[str, Any] = {}  # the last attempt's inputs and throughput note (a measurement's description)

    def attempt(c, now: bool = measure):
        inputs = _plan_inputs(task, c, counted, hw.device, vocab, now)
        measured["note"], measured["inputs"] = inputs.get("throughput_note", ""), inputs
        return plan(c, task.model, hw, vocab_size=vocab, strict=True, **inputs)

    def repair(refused: PlanRefused) -> dict[str, Any]:
        return _fixes(task, cfg, hw, vocab, refused, measured["inputs"])

    p, fixes, refusals = _planned(cfg, attempt, repair, measure)
    if p is None:
        return StageVerdict(stage=stage, runnable=False, refusals=refusals)
    p, length_note = _searched_length(task, stage, cfg.model_copy(update=fixes), p, counted, attempt)
    tokens = counted.tokens if counted is not None else None
    return StageVerdict(
        stage=stage,
        runnable=True,
        refusals=refusals,
        fixes=fixes,
        params=p.params,
        total_tokens=p.total_tokens,
        est_minutes=round(p.cost.hours * 60, 3),
        est_cost_usd=round(p.cost.cost, 4),
        memory_gib=round(p.memory.total_gib, 3),
        max_steps=p.max_steps,
        examples=counted.examples if counted is not None else None,
        row_tokens=round(tokens.mean(p.config.max_length), 2) if tokens is not None else None,
        row_tokens_source=tokens.source if tokens is not None else None,
        longest_row=tokens.longest if tokens is not None else None,
        tokens_per_second=round(p.cost.tokens_per_second, 2),
        throughput_source=p.cost.throughput_source,
        estimate_note=measured["note"] or flop_note(p),
        step_seconds=round(p.cost.hours * 3600 / max(p.max_steps, 1), 4),
        length_note=length_note,
        reasons=list(p.reasons) + ([length_note] if length_note else []),
        warnings=list(p.warnings),
    )


def _planned(cfg, attempt, repair, measure: bool) -> tuple[Any, dict[str, Any], list[dict[str, str]]]:
    """(the plan, the fixes it needed, the refusals they fixed), or (None, {}, the refusals) when nothing repairs
    them. What a fix repairs is found before anything is measured (``attempt(c, False)``: a stored measurement or
    the FLOP guess), so that only the settings that will run are measured; a time refusal is judged measured."""

    def fixed(refused: PlanRefused, fixes: dict[str, Any]) -> tuple[Any, dict[str, Any], list[dict[str, str]]]:
        said = [r.model_dump() for r in refused.refusals]
        if not fixes:
            return None, {}, said
        try:
            return attempt(cfg.model_copy(update=fixes), measure), fixes, said
        except PlanRefused as still:
            return None, {}, [r.model_dump() for r in still.refusals]

    if measure:
        try:
            attempt(cfg, False)
        except PlanRefused as refused:
            if fixes := repair(refused):
                return fixed(refused, fixes)
    try:
        return attempt(cfg, measure), {}, []
    except PlanRefused as refused:
        return fixed(refused, repair(refused))


def _fixes(task, cfg, hw, vocab, refused: PlanRefused, inputs: dict[str, Any]) -> dict[str, Any]:
    """The settings that repair the planner's refusals where it can confirm one (see the module's notes), planned
    on the data the refused plan was told of (``inputs``: its rows, their tokens, the longest)."""
    fixes: dict[str, Any] = {}
    if any(r.field == "max_length" for r in refused.refusals) and task.model.path is None:
        fixes["max_length"] = task.model.max_position_embeddings
    if any(r.field != "max_length" for r in refused.refusals):
        try:
            base = cfg.model_copy(update=fixes)
            data = {k: v for k, v in inputs.items() if k in ("dataset_rows", "row_tokens", "longest_row")}
            rec = recommend(task.model, hw, base=base, vocab_size=vocab, strict=False, **data).config
        except PlanRefused:
            rec = None
        if rec is not None:
            fixes.update({k: getattr(rec, k) for k in FIXABLE if getattr(rec, k) != getattr(cfg, k)})
        if getattr(task, "distributed", None) is not None:
            fixes.pop("strategy", None)  # the task's distributed block says how to launch; not the planner
    return fixes


def flop_note(p) -> str:
    """How a plan's minutes were made without a measurement: the FLOP guess spelled out."""
    hw = p.hardware
    fpt = p.cost.flops / max(p.total_tokens, 1)
    return (
        f"a FLOP guess: {p.world_size} x {hw.peak_flops() / 1e12:.2g} TFLOP/s peak x assumed MFU {hw.mfu():g} "
        f"/ {fpt:,.0f} FLOPs per token; nothing measured for this model on this machine (trainteam validate "
        "measures it)"
    )


# The share of the time left that recipe.py keeps for evaluation, merging and registering (its RESERVE).
SEARCH_RESERVE = 0.15


def _searched_length(task, stage: str, cfg, p, counted: DataTokens | None, attempt):
    """(the plan, a note): a stage whose length is the search's, still at its placeholder, planned at what its
    share of the budget affords after the probes when the placeholder would not fit it; else ``p`` as it is."""
    searched = getattr(getattr(task, "search", None), "stages", None) or {}
    own = task.train_config(stage)
    if "max_steps" not in searched.get(stage, []) or cfg.num_train_epochs is not None or cfg.max_steps != own.max_steps:
        return p, None  # a length the task gave, or one the search (or the engineer) has set since
    allowed = task.budget.allowed_s()
    share = allowed * (1 - SEARCH_RESERVE - task.search.budget_fraction) / max(1, len(searched))
    step_s = p.cost.hours * 3600 / max(p.max_steps, 1)
    if p.max_steps * step_s <= share:
        return p, None
    examples = counted.examples if counted is not None and counted.examples else None
    batch = (
        default_batch(examples)
        if examples and "per_device_train_batch_size" in searched[stage]
        else cfg.per_device_train_batch_size
    )
    epochs = task.search.max_epochs if task.model.path is not None and examples else None
    steps = final_steps(
        share,
        step_s * batch / cfg.per_device_train_batch_size,
        examples or 1,
        batch,
        cfg.gradient_accumulation_steps,
        epochs,
        1,
    )
    try:
        fitted = attempt(
            cfg.model_copy(
                update={
                    "max_steps": steps,
                    "per_device_train_batch_size": batch,
                    "warmup_steps": min(cfg.warmup_steps, steps - 1),
                }
            )
        )
    except PlanRefused:
        return p, None  # the placeholder's plan stands; the search sets the length before anything trains
    note = (
        f"max_steps: the recipe search's to choose; planned at {steps} steps, what this stage's "
        f"{share / 60:.1f} min of the {allowed / 60:g} min budget afford after the probes at "
        f"{step_s * batch / cfg.per_device_train_batch_size:.2f} s a step"
        + (f" (at most {epochs:g} passes over {examples} examples)" if epochs else "")
        + f"; its placeholder {p.max_steps} steps would take {p.cost.hours * 60:.1f} min"
    )
    return fitted, note


class DataTokens(BaseModel):
    """A stage's training data as the planner counts it: examples, and a sample's tokens."""

    rows: int | None = Field(description="training rows (None: unknown)")
    tokens: RowTokens

    @property
    def examples(self) -> int | None:
        """Training examples the trainer iterates (an SFT conversation with k replies is k)."""
        return round(self.rows * self.tokens.examples_per_row) if self.rows else None


def data_tokens(task, stage: str, method: str) -> DataTokens | None:
    """The stage's training rows and a sample's tokens, counted with the model's tokenizer when the
    task fine-tunes a local model (else bounded by bytes); None when the data cannot be read (the
    data checks report that with their own message)."""
    data = task.stage_data(stage)
    tokenizer_path = (str(task.model.path), task.model.chat_template) if task.model.path is not None else None
    try:
        if data.demo:
            return _demo_tokens(data, method, tokenizer_path)
        return _file_tokens(
            Path(data.path),
            None if data.eval_path is None else Path(data.eval_path),
            data.split,
            data.eval_split,
            tuple(sorted(data.columns.items())),
            data.eval_fraction,
            data.seed,
            data.max_row_bytes,
            method,
            tokenizer_path,
            _stamp(data.path),
        )
    except (BadInput, OSError, ValueError, KeyError, TypeError):
        return None


def _counted(rows: list[dict], method: str, tokenizer_path: tuple[str, str | None] | None) -> RowTokens:
    if tokenizer_path is None:
        return bytes_bound(rows, method)
    return count_tokens(model_tokenizer(*tokenizer_path), rows, method)


def _demo_tokens(data, method: str, tokenizer_path: tuple[str, str | None] | None) -> DataTokens:
    rows, _ = generate_arithmetic(
        ArithmeticConfig(
            task=data.demo,
            max_operand=data.max_operand,
            n_train=min(SAMPLE_ROWS, data.n_train),
            n_eval=0,
            seed=data.seed,
            fixed_width=data.fixed_width,
        )
    )
    return DataTokens(rows=data.n_train, tokens=_counted(rows, method, tokenizer_path))


def _stamp(path) -> tuple[int, int]:
    """Size and modification time of a data file or folder: a changed file is counted again."""
    st = Path(path).stat()
    return st.st_size, st.st_mtime_ns


@lru_cache(maxsize=32)
def _file_tokens(
    path: Path,
    eval_path: Path | None,
    split: str | None,
    eval_split: str | None,
    columns: tuple,
    eval_fraction: float,
    seed: int,
    max_row_bytes: int,
    method: str,
    tokenizer_path: tuple[str, str | None] | None,
    stamp: tuple[int, int],
) -> DataTokens:
    parts = plan_splits(path, eval_path, split=split, eval_split=eval_split)
    n = sum(1 for _ in iter_items(parts.train.path, split=parts.train.split, max_row_bytes=max_row_bytes))
    if parts.eval is None and n >= 2:  # corpus holds a seeded share of the training rows out
        n -= len(held_out(n, eval_fraction, seed))
    sample = read_rows(
        parts.train.path, columns=dict(columns), split=parts.train.split, limit=SAMPLE_ROWS, max_row_bytes=max_row_bytes
    )
    return DataTokens(rows=n, tokens=_counted(sample, method, tokenizer_path))


def _plan_inputs(task, cfg, counted: DataTokens | None, device: str, vocab: int | None, measure: bool) -> dict:
    """What ``plan`` is told of the data and the measured throughput, with where each came from."""
    out: dict[str, Any] = {}
    if counted is None:
        return out
    tokens = counted.tokens
    examples = counted.examples
    method = get_method(cfg.method)
    if method.packs(cfg) and examples and counted.rows:  # examples are counted from rows
        examples = max(1, int(counted.rows * tokens.mean() / cfg.max_length))  # packed windows of seq_len
    out["dataset_rows"] = examples
    if method.cuts_rows and tokens.lengths:
        out["row_tokens"] = tokens.mean(cfg.max_length, method.row_sequences)
        out["row_tokens_note"] = (
            "counted with the model's tokenizer" if tokens.source == "tokenizer" else "an upper bound from UTF-8 bytes"
        )
    if longest := every_row_longest(counted):
        out["longest_row"] = longest
    cal = _calibration(task, cfg, out.get("row_tokens"), device, vocab, measure)
    if cal is not None:
        out["tokens_per_second"] = cal.tokens_per_s * cfg.num_nodes * cfg.devices_per_node
        out["throughput_note"] = cal.describe()
    return out


def every_row_longest(counted: DataTokens | None) -> int | None:
    """The longest training example in tokens when the sample holds every row (a longer row may hide in the rest
    of a larger set: then None, and the planner sizes a batch at max_length)."""
    if counted is None or not counted.rows or counted.tokens.sampled_rows < counted.rows:
        return None
    return counted.tokens.longest or None


def calibration_tokens(cfg, row_tokens: float | None) -> float:
    """Tokens of one micro-batch as the trainer computes it: rows of ``row_tokens`` (SFT, DPO), else windows."""
    return cfg.per_device_train_batch_size * (row_tokens or cfg.max_length)


def _calibration(
    task, cfg, row_tokens: float | None, device: str, vocab: int | None, measure: bool
) -> Calibration | None:
    """The stored measurement for this stage's model and shape; with ``measure``, taken now if missing.
    GRPO's time goes to generation, which a training step does not measure: it keeps the guess."""
    if get_method(cfg.method).generates:
        return None
    tokens = calibration_tokens(cfg, row_tokens)
    if not measure:
        return lookup(task.model, cfg, tokens, device=device, vocab_size=vocab)
    tok = model_tokenizer(str(task.model.path), task.model.chat_template) if task.model.path is not None else None
    return calibrate(task.model, cfg, tokens, device=device, tokenizer=tok, vocab_size=vocab)
