"""The self-training loop (issue 15): the team's runs → chat data → tool-calling SFT → measured → bound.

``trainteam self-improve`` chains these, each a function here (``benchmarks/self_improve.py`` calls the
same ones):

1. ``gather_rows``: the chat rows of the workspace's runs (by default those that completed with every
   gate passed), written with the compact prompt (``agents/compact.py``) unless told otherwise;
2. ``build_data``: curated as ``curate run --heldout-by run_id`` does (row checks, exact dedup, no near
   dedup: one step's turns in two runs are near duplicates), whole runs held out; every other training
   run's id renamed in its conversations (``vary_run_ids``);
3. ``sft_task``: the ``train_model`` task that LoRA-tunes the base model on the training rows with a
   chat template that writes tools (the command runs it through the normal workflow, whose
   ``register_model`` waits for a person unless ``--yes``);
4. ``evaluate``: tool-call agreement on the held-out runs' steps (``agents/tool_agreement.py``);
5. ``gate``: the agreement against ``min_agreement``; only then ``bind`` the personas (with the prompt
   the model was trained on).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainteam.agents import transcripts
from trainteam.agents.bound_models import bind_role, persona_role
from trainteam.agents.cards import PERSONAS
from trainteam.agents.tool_agreement import agreement_of, call_turns, read_rows
from trainteam.contract.step_outputs import RegisterOutput
from trainteam.core.errors import BadInput
from trainteam.curation.jsonl import read_jsonl, write_jsonl
from trainteam.curation.row_checks import row_of, row_records
from trainteam.curation.splits import split_by_group
from trainteam.trainers.planning import detect_hardware
from trainteam.trainers.serving.registry import ModelRegistry
from trainteam.workflows.engine.store import RunStore
from trainteam.workflows.runs.runner import GENERATED_RUN_ID
from trainteam.workflows.steps.catalog import STEPS
from trainteam.workflows.steps.curate import curate_recorded, default_config

EVAL_ROWS = 1
# Each pair padded to a multiple of this many tokens. Measured (bare TRL SFT, SmolLM2-135M LoRA, bf16 on a CPU,
# batch 1, pairs of 400-1,024 tokens): RSS after a step grew ~20 MB a step for every new sequence length
# (per-shape caches below torch: half of it oneDNN's primitive cache), 1,140 -> 1,717 MB in 30 steps and 4.9 GB
# at the peak of a 150-step loop; padded to multiples of 128 it stayed 1,140 -> 1,205 MB over 33 steps, at the
# same 3.3 s/step (ARCHITECTURE.md, the self-training loop)
PAD_TO = 128
# words of the names ``vary_run_ids`` gives training runs (benchmarks/self_improve.py checks the trained model
# on held-out runs renamed with words not among these)
ID_WORDS = (
    "sft",
    "lora",
    "sweep",
    "trial",
    "nightly",
    "quick",
    "retry",
    "mine",
    "check",
    "tune",
    "small",
    "long",
    "alpha",
    "beta",
    "test",
    "first",
    "run",
    "job",
    "team",
    "new",
)


class SelfImproveOptions(BaseModel):
    """What ``trainteam self-improve`` is told (every field has the command's default)."""

    model_config = ConfigDict(extra="forbid")

    model: Path = Field(description="the base model folder (a local instruct model)")
    chat_template: str = "qwen2_5"
    prompt: str = "compact"
    runs: list[str] = Field(default_factory=list)
    personas: list[str] = Field(default_factory=list, description="rows of these personas (default: all)")
    bind: list[str] = Field(default_factory=lambda: ["training_engineer"])
    heldout_fraction: float = Field(0.34, gt=0, lt=1)
    seed: int = 0
    steps: int = Field(150, gt=0)
    learning_rate: float = Field(1e-3, gt=0, lt=1)
    max_length: int = Field(1024, gt=0)
    lora_r: int = Field(8, gt=0)
    grad_accum: int = Field(1, gt=0)
    # measured in this loop on a 2-core AMD EPYC (avx512_bf16), SmolLM2-135M, pairs up to 1,024 tokens, batch 1:
    # fp32 5.2 s/step, 4.3-4.5 GB peak; bf16 3.2 s/step, ~4.3 GB; bf16 + checkpointing 3.6 s/step, 3.2 GB (fp32 +
    # checkpointing 7.8 s/step). The planner drops checkpointing where the run fits the machine twice over by its
    # estimate, unless ``max_memory_gib`` is set (benchmarks/self_improve.py sets 4)
    precision: Literal["auto", "fp32", "bf16"] = Field(
        "auto",
        description="auto: bf16 mixed precision where the "
        "CPU computes bf16 natively (avx512_bf16, amx_bf16) or on CUDA, "
        "fp32 elsewhere",
    )
    gradient_checkpointing: bool = True
    min_agreement: float = Field(0.95, ge=0, le=1)
    max_new_tokens: int = Field(96, gt=0)
    max_wall_minutes: float = Field(60, gt=0)
    max_memory_gib: float | None = Field(
        None,
        gt=0,
        description="the training run's memory budget "
        "(budget.max_memory_gib): the planner keeps gradient checkpointing "
        "when the stage needs it to fit, and drops it otherwise",
    )


class DataSplit(BaseModel):
    train: Path
    heldout: Path
    train_rows: int
    heldout_rows: int
    heldout_runs: list[str]
    eval: Path  # the workflow's own eval: the shortest held-out rows (its battery is not what the loop gates on)
    version: str | None = None


def gather_rows(
    ws,
    runs: list[str],
    personas: Iterable[str] = (),
    steps: Iterable[str] = (),
    status: str = "completed",
    style: str = "full",
) -> list:
    """The chat rows of ``runs`` (default: every run with transcripts; with ``status`` completed only
    those that completed with every gate passed), as ``transcripts export --format chat`` writes them."""
    from trainteam.agents.chat_export import chat_rows, gates_passed

    personas, steps = list(personas), list(steps)
    bad = next((p for p in personas if p not in PERSONAS), None)
    if bad is not None:
        raise BadInput(f"--persona: unknown persona {bad!r} (known: {', '.join(PERSONAS)})")
    missing = next((r for r in runs if not transcripts.run_dir(ws, r).is_dir()), None)  # run_dir checks the id
    if missing is not None:
        raise BadInput(f"--run: no transcripts for run {missing!r} in {ws.dir('transcripts')}")
    ids = runs or sorted(p.name for p in ws.dir("transcripts").iterdir() if p.is_dir())
    if status == "completed":
        store = RunStore(ws.engine)
        ids = [r for r in ids if (store.get(r) or {}).get("status") == "completed" and gates_passed(ws, r)]
    return chat_rows(ws, ids, STEPS, personas=personas, steps=steps, style=style)


def build_data(ws, rows: list[dict], folder: Path, fraction: float, seed: int) -> DataSplit:
    """Curate ``rows`` (chat rows) and hold out whole runs: ``train.jsonl`` and ``heldout.jsonl`` in ``folder``."""

    if len({r["run_id"] for r in rows}) < 2:
        raise BadInput(
            f"runs: {len({r['run_id'] for r in rows})} run(s) with usable transcripts; the loop holds "
            "out whole runs and needs two at least (run train_model on a task again)"
        )
    records = list(row_records(rows, "transcripts"))
    split_by_group([row_of(r) for r in records], "run_id", fraction, seed, where="runs")  # checked before storing
    cfg = default_config("chat").model_copy(update={"near_dedup": None})
    report = curate_recorded(ws.graph, records, {}, cfg, folder, progress=False)
    assert report.output is not None  # curated into folder
    curated = [{"id": r["id"], **row_of(r)} for r in read_jsonl(Path(report.output))]
    train, held = split_by_group(curated, "run_id", fraction, seed, where=str(report.output))
    train = vary_run_ids(train, seed)
    shortest = sorted(held, key=lambda r: len(json.dumps(r, default=str)))[:EVAL_ROWS]
    return DataSplit(
        train=write_jsonl(train, folder / "train.jsonl"),
        heldout=write_jsonl(held, folder / "heldout.jsonl"),
        eval=write_jsonl(shortest, folder / "eval.jsonl"),
        train_rows=len(train),
        heldout_rows=len(held),
        heldout_runs=sorted({r["run_id"] for r in held}),
        version=report.version,
    )


def training_precision(asked: str) -> str:
    """``auto``: bf16 where this machine computes it natively (the planner's ``detect_hardware``: a CUDA
    device with bf16, a CPU with avx512_bf16 or amx_bf16: faster and smaller there), else fp32."""
    if asked != "auto":
        return asked
    return "bf16" if detect_hardware().bf16 else "fp32"


def sft_task(opts: SelfImproveOptions, data: DataSplit, name: str = "self-improve") -> dict[str, Any]:
    """The ``train_model`` task: LoRA SFT of ``opts.model`` on the training rows, loss on the assistant
    turns, each pair cut to ``max_length`` from its start (TRL's ``keep_end``: the call stays)."""
    training = {
        "max_steps": opts.steps,
        "per_device_train_batch_size": 1,
        "gradient_accumulation_steps": opts.grad_accum,
        "learning_rate": opts.learning_rate,
        "max_length": opts.max_length,
        "use_peft": True,
        "lora_r": opts.lora_r,
        "lora_alpha": 2 * opts.lora_r,
        "logging_steps": 1,
        "warmup_ratio": 0.1,
        "gradient_checkpointing": opts.gradient_checkpointing,
        "precision": training_precision(opts.precision),
        "trl": {"truncation_mode": "keep_end", "pad_to_multiple_of": PAD_TO},
    }
    return {
        "name": name,
        "model": {"path": str(opts.model), "chat_template": opts.chat_template},
        "data": {"path": str(data.train), "eval_path": str(data.eval)},
        # The loop's own gate is the tool-call agreement it measures next (``evaluate``); the run's gate only
        # holds that training did not break the model: held-out loss on the assistant turns, against the base
        # measured once. (An exact-match gate on whole persona turns would be blind: it passed on 0 -> 0.)
        "curriculum": [
            {
                "name": "sft",
                "training": training,
                "battery": {"metrics": ["heldout_loss"]},
                "gates": [{"metric": "heldout_loss", "max_regression": 0.5}],
            }
        ],
        "eval": {"batch_size": 1},
        # held-out runs are other runs of the same steps: their turns share long n-grams with the training
        # runs' by design, and decontamination would drop the training turns of every step held out
        "curation": {"near_dedup": None, "decontam": None, "rows": {"max_tokens": None}},
        "budget": {
            "max_wall_minutes": opts.max_wall_minutes,
            **({"max_memory_gib": opts.max_memory_gib} if opts.max_memory_gib else {}),
        },
    }


def vary_run_ids(rows: list[dict], seed: int) -> list[dict]:
    """``rows`` with every other product-made run id (``<task>-<stamp>-<hex>``, sorted) replaced in its
    conversations by a name of a person's kind (``sweep-3``, ``nightly_tune``, ``lora7``); the ``id`` and
    ``run_id`` columns keep the real run, so lineage and the held-out split are untouched.

    Why: the compact prompt names the run ("Run <id>, step ..."). With every training run named as the
    product names them (``tiny-<stamp>-<hex>``), 2 of 3 trained models measured took a run with a hand-picked
    id (``bound-training``) for another task: the training_engineer put its report's fields into ``train``
    (benchmarks/self_improve.py, session 14). With half the runs hand-named, the same loop trained a model
    that ran that id through. Ids a person gave are kept: they are that variety already."""
    rng = random.Random(seed)
    runs = sorted(r for r in {r["run_id"] for r in rows} if GENERATED_RUN_ID.search(r))
    names = {run: renamed_id(rng) for run in runs[1::2]}
    return [rename_run(r, r["run_id"], names[r["run_id"]]) if r["run_id"] in names else r for r in rows]


def renamed_id(rng: random.Random, words: tuple[str, ...] = ID_WORDS) -> str:
    """A run name as a person might give one."""
    a, b, n = rng.choice(words), rng.choice(words), rng.randint(1, 99)
    return rng.choice((f"{a}-{n}", f"{a}_{b}", f"{a}{n}", f"{a}-{b}-{n}", f"v{n}-{a}", a))


def rename_run(row: dict, old: str, new: str) -> dict:
    """``row`` with ``old`` replaced by ``new`` wherever its conversation says it (prompt, tool results, paths)."""
    return {**row, "messages": json.loads(json.dumps(row["messages"]).replace(old, new))}


def registered_by(ws, run_id: str):
    """The model the run ``run_id`` registered (its ``register_model`` step's; a checkpoint registered
    before by another run is that run's record), None when it registered none."""
    for attempt in reversed(RunStore(ws.engine).attempts(run_id)):
        model_id = RegisterOutput.stored(attempt.get("output")).model_id
        if attempt["step"] == "register_model" and model_id:
            return ModelRegistry.of(ws).get(model_id)
    return None


def evaluate(folder: Path, heldout: Path, personas: Iterable[str], max_new_tokens: int):
    """Tool-call agreement of the model in ``folder`` on the held-out steps of ``personas``."""
    turns = call_turns(read_rows(heldout), personas)
    if not turns:
        raise BadInput(f"--bind: the held-out runs have no tool calls of {', '.join(personas)}")
    return agreement_of(folder, turns, max_new_tokens)


def gate(agreement: float, min_agreement: float) -> tuple[bool, str]:
    ok = agreement >= min_agreement
    return ok, f"tool-call agreement {agreement:.3f} {'>=' if ok else '<'} {min_agreement:.3f}"


def bind(ws, model_id: str, personas: Iterable[str], prompt: str, by: str) -> list[str]:
    """Bind each persona's role to the model, with the prompt it was trained on."""

    roles = [persona_role(p) for p in personas]
    for role in roles:
        bind_role(ws, role, model_id, by=by, prompt=prompt)
    return roles
