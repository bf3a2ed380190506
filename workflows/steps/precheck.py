"""data_curator's pre-check of a user's own data: a small proxy says whether the data teaches anything
before the real run spends its budget on it (``trainers/search/ladder.py``).

When it runs (``task.precheck``): ``always``; ``auto`` (the default) for the user's own data
(``data.path``) when the run costs money (``budget.cost_per_hour_usd > 0``) or the run planner's
estimate for its stages reaches ``min_minutes``; ``never``. A model folder (``model.path``) has no
config to shrink to a proxy, and chat / preference rows are not what the ladder reads: the step is
skipped then, saying why, as it is for a small run or the bundled demo.

What it checks: the smallest rung of the target's ladder (hidden 32, one layer) is trained twice from
the same initial weights, the same steps and batch, and both are scored on the same held-out rows:

* with ``precheck.reference``: once on the data, once on the reference, scored on the task's
  held-out set (the ladder comparison; ``worse`` or ``unlearnable`` fails);
* without one, a learnability check: once on the data, once on a control that holds the same
  rows with the signal taken out (each answer moved to another row's prompt; a text row's characters
  shuffled), scored on rows held out of the data. The data must teach the proxy clearly more than
  its control (held-out loss at least ``LEARN_TOLERANCE`` lower), else it is ``unlearnable``.
  A fall below the untrained proxy's loss is not enough: on 540 sums the proxy's held-out loss fell
  5.1 -> 1.3 with the right answers and 5.1 -> 1.5 with random ones (it learns the answers' digits
  either way); against the control the right answers scored 0.91-0.95 of it over three seeds, random
  ones 0.999-1.002, random text 0.999-1.005, text sums 0.72-0.82 (150 steps, lr 1e-2, 3-4 s a pair).

A failing verdict asks a person (``accept_precheck``, the verdict as the evidence): approved, the run
goes on (the re-run reads ``decided.accepted_gate`` and the verdict stored beside the proxies, without
training them again); rejected, the run stops with the verdict's reason.
"""

from __future__ import annotations

import random
import shutil
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from trainteam.contract.step_io import NeedsPerson, Resume, StepResult, ToolContext
from trainteam.core.errors import BadInput
from trainteam.curation import read_jsonl
from trainteam.curation.formats import row_kind
from trainteam.curation.rows import read_rows
from trainteam.trainers.search.ladder import (
    LadderVerdict,
    ProxyRun,
    compare_datasets,
    model_ladder,
)
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.tokenizer import load_tokenizer
from trainteam.trainers.training.tokenizer import train_tokenizer as fit
from trainteam.workflows.task.curriculum import curriculum_from_task
from trainteam.workflows.task.stage_plan import plan_stage

PROXY_STEPS, PROXY_BATCH, PROXY_LR = 150, 16, 1e-2  # measured on the smallest rung: see the module's note
PROXY_MAX_SEQ = 128
RUNGS = 8  # halve until the ladder stops shrinking: the cheapest proxy, the one the settings were measured on
HELDOUT_ROWS = 200  # at most, and a tenth of the rows at most
MIN_ROWS = 40
LEARN_TOLERANCE = 0.03  # signal-free data scored 0.999-1.005 of its control; learnable 0.72-0.95
LADDER_TOLERANCE = 0.05
CHECKED_KINDS = ("text", "pair")

Check = Literal["learnability", "ladder"]


class PrecheckVerdict(BaseModel):
    """What the pre-check found: the approval's evidence and the step's details."""

    check: Check
    verdict: Literal["learnable", "unlearnable", "better", "comparable", "worse"]
    accept: bool
    why_run: str = Field(description="why the pre-check ran (the task's mode, the planner's estimate, the cost)")
    against: str = Field(description="what the data was compared with")
    ratio: float = Field(description="held-out loss of the data's proxy / that of the other proxy")
    data: ProxyRun
    baseline: ProxyRun
    heldout: str
    heldout_rows: int
    proxy: dict[str, int]
    seconds: float
    reasons: list[str] = Field(default_factory=list)

    def line(self) -> str:
        return f"pre-check ({self.check}): {self.verdict}: {self.reasons[-1]}"


def run_estimate(task) -> tuple[float, float]:
    """The run planner's estimate for every stage the run trains: (minutes, dollars)."""
    cur = curriculum_from_task(task)
    align = cur.align_stage()
    stages = [s.name for s in cur.training_stages()] + ([align.name] if align is not None else [])
    verdicts = [plan_stage(task, s, task.train_config(s)) for s in stages]
    return sum(v.est_minutes for v in verdicts), sum(v.est_cost_usd for v in verdicts)


def reason_to_run(task) -> tuple[bool, str]:
    """Whether the pre-check runs for ``task``, and why (or why not), in one line."""
    spec = task.precheck
    if spec.mode == "never":
        return False, "precheck.mode: never"
    if task.model.path is not None:
        return False, (
            f"model.path: {task.model.path} is a model folder, which cannot be shrunk to a proxy; "
            "its gates judge the data instead"
        )
    if spec.mode == "always":
        return True, "precheck.mode: always"
    if task.data.path is None:
        return False, "the bundled demo data; the pre-check is for your own data (data.path)"
    if task.budget.cost_per_hour_usd > 0:
        return True, f"the run costs money (budget.cost_per_hour_usd {task.budget.cost_per_hour_usd:g})"
    minutes, _ = run_estimate(task)
    if minutes >= spec.min_minutes:
        return True, f"the planner estimates {minutes:.1f} min for the run (precheck.min_minutes {spec.min_minutes:g})"
    return False, (
        f"the planner estimates {minutes:.1f} min for the run, under precheck.min_minutes "
        f"{spec.min_minutes:g}: a small run is its own check"
    )


def precheck_data(ctx: ToolContext) -> StepResult:
    """The pre-check of the task's training data, or a skip saying why (see the module's note)."""
    run, why = reason_to_run(ctx.task)
    if not run:
        return _skipped(why)
    work = ctx.ws.dir("datasets") / "prechecks" / ctx.run_id / f"v{ctx.visit}"
    accepted = ctx.decided.accepted_gate
    stored = work / "verdict.json"
    if accepted is not None and stored.is_file():  # a person accepted the failed verdict: on with the run
        verdict = PrecheckVerdict.model_validate_json(stored.read_text())
        return StepResult(
            summary=f"{verdict.line()}; accepted by {accepted.decided_by or 'a person'}",
            metrics=_metrics(verdict),
            details={"precheck": verdict.model_dump(mode="json"), "accepted_by": accepted.model_dump(mode="json")},
        )
    data = ctx.latest("prepare_corpus", "curate")
    rows = read_jsonl(data.artifact("train"))
    kind = row_kind(rows[0]) if rows else "no"
    if kind not in CHECKED_KINDS:
        return _skipped(f"{kind} rows: the ladder reads text and prompt/completion rows")
    if len(rows) < MIN_ROWS:
        return _skipped(f"{len(rows)} training rows are too few for a proxy to say anything (at least {MIN_ROWS})")
    verdict = _check(ctx, rows, data.artifacts.get("eval"), why, work)
    stored.write_text(verdict.model_dump_json(indent=1))
    details = {"precheck": verdict.model_dump(mode="json")}
    if verdict.accept or accepted is not None:
        return StepResult(summary=verdict.line(), metrics=_metrics(verdict), details=details)
    needs = NeedsPerson(
        action="accept_precheck",
        requested_by=ctx.persona,
        refused="training on data the pre-check failed",
        proposed={"train_on": data.artifacts["train"]},
        evidence=verdict.model_dump(mode="json"),
        resume=Resume(kind="accept_gate"),
    )
    return StepResult(outcome="failed", summary=verdict.line(), metrics=_metrics(verdict), details=details, needs=needs)


def _skipped(why: str) -> StepResult:
    return StepResult(outcome="skipped", summary=f"pre-check skipped: {why}", details={"precheck": {"skipped": why}})


def _metrics(v: PrecheckVerdict) -> dict[str, float]:
    return {
        "precheck.ratio": round(v.ratio, 4),
        "precheck.heldout_loss": round(v.data.heldout_loss, 4),
        "precheck.baseline_heldout_loss": round(v.baseline.heldout_loss, 4),
        "precheck.seconds": v.seconds,
    }


def _check(ctx: ToolContext, rows: list[dict], eval_path: str | None, why: str, work: Path) -> PrecheckVerdict:
    """Train the two proxies and judge; the proxies' folders are removed, the verdict kept."""
    task, t0 = ctx.task, time.monotonic()
    rng = random.Random(task.data.seed)
    rows = [_shape(r) for r in rows]
    rng.shuffle(rows)
    reference = task.precheck.reference
    heldout: list[dict[str, str]] | None
    if reference is None:
        n = max(1, min(HELDOUT_ROWS, len(rows) // 10))
        heldout, train = rows[:n], rows[n:][: PROXY_STEPS * PROXY_BATCH]
        other, where = _control(train, rng), f"{n} rows held out of the data"
    else:
        train = rows[: PROXY_STEPS * PROXY_BATCH]
        other = [_shape(r) for r in _reference_rows(reference, row_kind(train[0]))][: PROXY_STEPS * PROXY_BATCH]
        heldout = [_shape(r) for r in read_jsonl(Path(eval_path))][:HELDOUT_ROWS] if eval_path else None
        where = "the task's held-out set" if heldout else "held-out reference rows"
    work.mkdir(parents=True, exist_ok=True)
    tokenizer = _tokenizer(task, train + other + (heldout or []), work / "tokenizer")
    proxy = model_ladder(task.model, RUNGS)[0]
    found = compare_datasets(
        {"data": train},
        other,
        tokenizer=tokenizer,
        model=task.model,
        work_dir=work,
        config=_proxy_config(task, proxy),
        eval_data=heldout,
        rungs=RUNGS,
        seed=task.data.seed,
        tolerance=LADDER_TOLERANCE if reference is not None else LEARN_TOLERANCE,
    )["data"]
    for name in ("data", "reference", "tokenizer"):
        shutil.rmtree(work / name, ignore_errors=True)
    seconds = round(time.monotonic() - t0, 2)
    if reference is None:
        return _learnability(found, row_kind(train[0]), why, where, seconds)
    return _ladder(found, why, str(reference), seconds)


def _shape(row: dict[str, Any]) -> dict[str, str]:
    """A canonical row as the ladder trains on it (its id and other fields left out)."""
    if row_kind(row) == "text":
        return {"text": row["text"]}
    return {"prompt": row["prompt"], "completion": row["completion"]}


def _control(rows: list[dict], rng: random.Random) -> list[dict]:
    """The same rows without their signal: each answer moved to another prompt, a text's characters shuffled."""
    if "text" in rows[0]:
        return [{"text": "".join(rng.sample(r["text"], len(r["text"])))} for r in rows]
    answers = [r["completion"] for r in rows]
    rng.shuffle(answers)
    return [{"prompt": r["prompt"], "completion": a} for r, a in zip(rows, answers, strict=True)]


def _reference_rows(path: Path, kind: str) -> list[dict]:
    try:
        rows = read_rows(path, limit=PROXY_STEPS * PROXY_BATCH)
    except BadInput as exc:
        raise BadInput(f"precheck.reference: {exc}") from None
    found = {row_kind(r) for r in rows[:1]}
    if found != {kind}:
        raise BadInput(f"precheck.reference: {path}: holds {', '.join(found) or 'no'} rows; the data's are {kind} rows")
    return rows


def _tokenizer(task, rows: list[dict], out: Path):
    texts = (r.get("text") or r["prompt"] + r["completion"] for r in rows)
    return load_tokenizer(fit(texts, task.tokenizer, out))


def _proxy_config(task, proxy) -> TrainConfig:
    first = curriculum_from_task(task).training_stages()[:1]
    seq_len = task.train_config(first[0].name).max_length if first else PROXY_MAX_SEQ
    return TrainConfig(
        max_steps=PROXY_STEPS,
        per_device_train_batch_size=PROXY_BATCH,
        learning_rate=PROXY_LR,
        warmup_steps=0,
        max_length=min(seq_len, PROXY_MAX_SEQ, proxy.max_position_embeddings),
        threads=task.threads,
    )


_CONTROLS = {
    "pair": ("each answer moved to another row's prompt", "the answers may not follow from the prompts"),
    "text": ("each row's characters shuffled", "the text may have no order a model could learn"),
}


def _learnability(v: LadderVerdict, kind: str, why: str, where: str, seconds: float) -> PrecheckVerdict:
    learnable = v.verdict == "better"
    d, c = v.custom, v.reference
    reasons = [
        (
            f"held-out loss on {where}: {d.heldout_loss:.4f} trained on the data, {c.heldout_loss:.4f} on its "
            f"control (ratio {v.ratio:.3f}; learnable below {1 - LEARN_TOLERANCE:.2f})"
        ),
        (
            f"training loss: data {d.first_loss:.3f} -> {d.last_loss:.3f}, control {c.first_loss:.3f} -> "
            f"{c.last_loss:.3f} ({d.steps} steps each, same initial weights)"
        ),
    ]
    control, hint = _CONTROLS[kind]
    reasons.append(
        "the proxy learns clearly more from the data than from its control"
        if learnable
        else f"the proxy learned no more from the data than from its control ({control}): {hint}"
    )
    return PrecheckVerdict(
        check="learnability",
        verdict="learnable" if learnable else "unlearnable",
        accept=learnable,
        why_run=why,
        against=f"a control: the same rows, {control}",
        ratio=v.ratio,
        data=d,
        baseline=c,
        heldout=where,
        heldout_rows=v.heldout_rows,
        proxy=_proxy(v),
        seconds=seconds,
        reasons=reasons,
    )


def _ladder(v: LadderVerdict, why: str, reference: str, seconds: float) -> PrecheckVerdict:
    return PrecheckVerdict(
        check="ladder",
        verdict=v.verdict,
        accept=v.accept,
        why_run=why,
        against=f"precheck.reference {reference}",
        ratio=v.ratio,
        data=v.custom,
        baseline=v.reference,
        heldout=v.heldout,
        heldout_rows=v.heldout_rows,
        proxy=_proxy(v),
        seconds=seconds,
        reasons=v.reasons if not v.accept else [*v.reasons, _AS_GOOD[v.verdict]],
    )


_AS_GOOD = {
    "better": "the data teaches the proxy more about the held-out rows than the reference does",
    "comparable": "the data teaches the proxy about as much as the reference does",
}


def _proxy(v: LadderVerdict) -> dict[str, int]:
    return {"hidden_size": v.proxy.hidden_size, "num_layers": v.proxy.num_layers, "num_heads": v.proxy.num_heads}
