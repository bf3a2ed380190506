"""Ladder pre-check: a cheap proxy run judges custom data before the big run spends money.

The smallest model of the ladder is trained briefly, twice, from the same initial weights,
with the same steps, batch and learning rate: once on the custom data, once on a reference
data set. Both proxies are then scored on the SAME held-out set (the target eval data when
given, else a split of the reference), so the only difference between the two numbers is
the training data. Custom data that teaches the proxy less about the target than the
reference does is flagged before a large model is trained on it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from trainteam.core.errors import BadInput
from trainteam.curation.jsonl import read_jsonl
from trainteam.trainers.fit.loop import train
from trainteam.trainers.methods.method_registry import fine_tune_method, from_scratch_method
from trainteam.trainers.planning import RunPlan
from trainteam.trainers.training.config import ModelSpec, TrainConfig
from trainteam.trainers.training.models import build_model

Verdict = Literal["better", "comparable", "worse", "unlearnable"]


class ProxyRun(BaseModel):
    """One proxy trained on one data set: its held-out loss and how its training loss moved."""

    name: str
    rows: int
    heldout_loss: float
    first_loss: float
    last_loss: float
    steps: int
    tokens: int | None = None


class LadderVerdict(BaseModel):
    verdict: Verdict
    accept: bool
    custom: ProxyRun
    reference: ProxyRun
    ratio: float = Field(description="custom held-out loss / reference held-out loss")
    tolerance: float
    heldout: str = Field(description="what both proxies were scored on")
    heldout_rows: int
    proxy: ModelSpec
    reasons: list[str] = Field(default_factory=list)


def model_ladder(spec: ModelSpec, rungs: int = 3, *, min_hidden: int = 32) -> list[ModelSpec]:
    """Smaller copies of ``spec`` (smallest first, ``spec`` last): width and depth halve per rung.

    Heads shrink with the width so the head size stays the target's; a local-folder
    model has no spec to shrink and is returned alone.
    """
    if rungs < 1:
        raise BadInput(f"rungs: {rungs} must be at least 1")
    if spec.path is not None:
        return [spec]
    head_dim = spec.hidden_size // spec.num_heads
    out = [spec]
    for _ in range(rungs - 1):
        cur = out[0]
        hidden = max(min_hidden, cur.hidden_size // 2)
        heads = max(1, hidden // head_dim)
        if hidden % heads:
            heads = 1
        kv = None
        if cur.num_kv_heads:
            kv = max(1, min(heads, cur.num_kv_heads // 2))
            while heads % kv:
                kv -= 1
        smaller = cur.model_copy(
            update={
                "hidden_size": hidden,
                "num_layers": max(1, cur.num_layers // 2),
                "num_heads": heads,
                "num_kv_heads": kv,
                "intermediate_size": cur.intermediate_size // 2 if cur.intermediate_size else None,
            }
        )
        if smaller == cur:
            break
        out.insert(0, ModelSpec.model_validate(smaller.model_dump()))
    return out


def _records(data: Any, name: str) -> list[dict]:
    if isinstance(data, (str, Path)):
        data = read_jsonl(Path(data))
    if not isinstance(data, (list, tuple)) or not data:
        raise BadInput(f"{name}: expected a non-empty list of records or a .jsonl path")
    return list(data)


def _method(records: list[dict], name: str) -> str:
    """Prompt/completion rows are fine-tuned, text rows pretrained (the registry's methods for each)."""
    first = records[0]
    if "prompt" in first and "completion" in first:
        return fine_tune_method()
    if "text" in first:
        return from_scratch_method()
    raise BadInput(f"{name}: records need 'text' or 'prompt'/'completion'; found {sorted(first)}")


def _proxy_run(
    name: str,
    method: str,
    config: TrainConfig,
    proxy: ModelSpec,
    tokenizer,
    records: list[dict],
    heldout: list[dict],
    out: Path,
) -> ProxyRun:
    model = build_model(proxy, tokenizer, attn_implementation=config.attn_implementation, seed=config.seed)
    cfg = config.model_copy(update={"output_dir": out / name, "resume": "never", "save_steps": None})
    report = train(method, cfg, model, records, tokenizer=tokenizer, eval_data=heldout, progress=False)
    losses = [v for _, v in report.losses]
    if "eval_loss" not in report.metrics or not losses:
        raise BadInput(f"{name}: the proxy run produced no held-out loss")
    k = max(1, min(3, len(losses) // 3))
    return ProxyRun(
        name=name,
        rows=len(records),
        heldout_loss=float(report.metrics["eval_loss"]),
        first_loss=sum(losses[:k]) / k,
        last_loss=sum(losses[-k:]) / k,
        steps=report.steps_done,
        tokens=report.telemetry.get("tokens"),
    )


def compare_datasets(
    candidates: dict[str, Any],
    reference: Any,
    *,
    tokenizer,
    model: ModelSpec | RunPlan,
    work_dir: Path,
    config: TrainConfig | None = None,
    eval_data: Any = None,
    heldout_fraction: float = 0.1,
    tolerance: float = 0.05,
    rungs: int = 3,
    seed: int = 0,
) -> dict[str, LadderVerdict]:
    """Judge each candidate data set against ``reference`` with one shared reference proxy run.

    ``model`` is the planned (target) model, or the ``RunPlan`` made for it; the proxy is the
    smallest rung of its ladder.
    ``config`` sets the proxy budget (default: 40 steps, batch 16, lr 3e-3, seq_len 64).
    """
    if not candidates:
        raise BadInput("candidates: nothing to judge")
    if not 0 < heldout_fraction < 1:
        raise BadInput(f"heldout_fraction: {heldout_fraction} must be between 0 and 1")
    if tolerance < 0:
        raise BadInput(f"tolerance: {tolerance} must be >= 0")
    ref = _records(reference, "reference")
    method = _method(ref, "reference")
    if eval_data is not None:
        heldout, where = _records(eval_data, "eval_data"), "eval_data"
    else:
        shuffled = ref[:]
        random.Random(seed).shuffle(shuffled)
        n = max(1, int(len(shuffled) * heldout_fraction))
        if n >= len(shuffled):
            raise BadInput(f"reference: {len(ref)} rows are too few to hold out {heldout_fraction:.0%}")
        heldout, ref, where = shuffled[:n], shuffled[n:], f"{n} held-out reference rows"
    parsed = {}
    for name, data in candidates.items():  # every input checked before any training
        if name == "reference":
            raise BadInput("candidates: 'reference' is a reserved name")
        recs = _records(data, name)
        if _method(recs, name) != method:
            raise BadInput(f"{name}: its records are {_method(recs, name)}-shaped, the reference's are {method}-shaped")
        parsed[name] = recs
    if isinstance(model, RunPlan):
        if model.model is None:
            raise BadInput("model: the plan was made from a parameter count; pass the ModelSpec")
        model = model.model
    proxy = model_ladder(model, rungs)[0]
    cfg = config or TrainConfig(
        max_steps=40, per_device_train_batch_size=16, learning_rate=3e-3, max_length=64, warmup_steps=0, seed=seed
    )
    cfg = cfg.model_copy(update={"seed": seed})
    work_dir = Path(work_dir)
    ref_run = _proxy_run("reference", method, cfg, proxy, tokenizer, ref, heldout, work_dir)

    verdicts = {}
    for name, recs in parsed.items():
        run = _proxy_run(name, method, cfg, proxy, tokenizer, recs, heldout, work_dir)
        verdicts[name] = _judge(
            run, ref_run, tolerance=tolerance, heldout=where, heldout_rows=len(heldout), proxy=proxy
        )
    return verdicts


def ladder_precheck(custom: Any, reference: Any, **kwargs) -> LadderVerdict:
    """Train the smallest rung on ``custom`` and on ``reference``; compare held-out loss.

    Keyword arguments are those of ``compare_datasets`` (tokenizer, model, work_dir, ...).
    """
    return compare_datasets({"custom": custom}, reference, **kwargs)["custom"]


def _judge(
    run: ProxyRun, ref: ProxyRun, *, tolerance: float, heldout: str, heldout_rows: int, proxy: ModelSpec
) -> LadderVerdict:
    ratio = run.heldout_loss / ref.heldout_loss
    reasons = [
        f"held-out loss on {heldout}: {run.name} {run.heldout_loss:.4f} vs reference {ref.heldout_loss:.4f} "
        f"(ratio {ratio:.3f}, tolerance ±{tolerance:.0%})",
        f"proxy hidden {proxy.hidden_size} x {proxy.num_layers} layers, {run.steps} steps each, same initial weights",
        f"training loss {run.name}: {run.first_loss:.3f} -> {run.last_loss:.3f}; "
        f"reference: {ref.first_loss:.3f} -> {ref.last_loss:.3f}",
    ]
    verdict: Verdict
    if run.last_loss >= run.first_loss * 0.98:
        verdict = "unlearnable"
        reasons.append(
            f"{run.name}: the proxy's training loss did not fall; the data has no learnable signal "
            "at this budget (or is corrupt)"
        )
    elif ratio > 1 + tolerance:
        verdict = "worse"
        reasons.append(f"{run.name} teaches the proxy less about the held-out set than the reference does")
    elif ratio < 1 - tolerance:
        verdict = "better"
    else:
        verdict = "comparable"
    return LadderVerdict(
        verdict=verdict,
        accept=verdict in ("better", "comparable"),
        custom=run,
        reference=ref,
        ratio=ratio,
        tolerance=tolerance,
        heldout=heldout,
        heldout_rows=heldout_rows,
        proxy=proxy,
        reasons=reasons,
    )
