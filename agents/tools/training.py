"""training_engineer's tools: tokenizer and training stages."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from trainteam.agents.tools.base import StepResult, ToolContext, sha256_file
from trainteam.graph import EdgeKind, NodeKind

TRAIN_STAGES = ("pretrain", "sft")


def _records(path: str):
    from trainteam.curation.demo import read_jsonl

    return read_jsonl(Path(path))


def train_tokenizer(ctx: ToolContext) -> StepResult:
    """Byte-level BPE on the training split, digits one per token; reused when the same
    dataset version and settings were seen before."""
    from trainteam.trainers import train_tokenizer as fit

    data = ctx.output("prepare_corpus")
    cfg = ctx.task.tokenizer
    key = hashlib.sha256((data["nodes"]["train"] + cfg.model_dump_json()).encode()).hexdigest()[:16]
    out_dir = ctx.ws.dir("tokenizers") / key
    if not (out_dir / "tokenizer.json").exists():
        texts = (r.get("text") or (r["prompt"] + r["completion"]) for r in _records(data["artifacts"]["train"]))
        fit(texts, cfg, out_dir)
    node = ctx.graph.link(NodeKind.TOKENIZER, key, [(EdgeKind.DERIVED_FROM, data["nodes"]["train"]),
                                                   (EdgeKind.PRODUCED_BY, ctx.step_node)],
                          path=str(out_dir), vocab_size=cfg.vocab_size, split_digits=cfg.split_digits)
    return StepResult(summary=f"tokenizer {key} (vocab {cfg.vocab_size})", artifacts={"tokenizer": str(out_dir)},
                      nodes={"tokenizer": node})


def _checkpoint_node(ctx: ToolContext, final_dir: Path, stage: str, data_node: str, tok_node: str | None,
                     parent: str | None, metrics: dict) -> str:
    weights = sorted(final_dir.glob("*.safetensors"))
    digest = hashlib.sha256("".join(sha256_file(w) for w in weights).encode()).hexdigest()[:16]
    edges = [(EdgeKind.PRODUCED_BY, ctx.run_node), (EdgeKind.PRODUCED_BY, ctx.step_node),
             (EdgeKind.TRAINED_ON, data_node)]
    if tok_node:
        edges.append((EdgeKind.USES, tok_node))
    if parent:
        edges.append((EdgeKind.DERIVED_FROM, parent))
    return ctx.graph.link(NodeKind.CHECKPOINT, digest, edges, path=str(final_dir), stage=stage,
                          run_id=ctx.run_id, metrics=metrics)


def train(ctx: ToolContext) -> StepResult:
    """Run the task's training stages in order (pretrain from random init, then SFT).

    Checkpoints go to ``checkpoints/<run>/<stage>`` with ``resume="auto"``, so a run
    resumed after a crash continues from the last complete checkpoint.
    """
    from trainteam.trainers import build_model, load_tokenizer
    from trainteam.trainers import train as run_training

    task = ctx.task
    data = ctx.output("prepare_corpus")
    stages = [s for s in TRAIN_STAGES if s in task.stages]
    retry = ctx.visit > 1
    tok_out = ctx.outputs.get("train_tokenizer") or {}
    if tok_out.get("outcome") not in (None, "skipped"):
        tok_path, tok_node = Path(tok_out["artifacts"]["tokenizer"]), tok_out["nodes"]["tokenizer"]
    elif task.model.path is not None:
        tok_path, tok_node = task.model.path, None
    else:
        raise LookupError("train: no tokenizer (add the pretrain stage, or give model.path)")
    tokenizer = load_tokenizer(tok_path)

    model = task.model.path
    parent = None
    metrics: dict[str, float] = {}
    curves: dict[str, list] = {}
    final_dir = None
    for stage in stages:
        cfg = task.train_config(stage)
        if retry:  # the changed plan of a second attempt after a failed gate: train twice as long
            cfg = cfg.model_copy(update={"max_steps": cfg.max_steps * 2})
        out = ctx.ws.dir("checkpoints") / ctx.run_id / f"{stage}-v{ctx.visit}"
        cfg = cfg.model_copy(update={"output_dir": out, "resume": "auto"})
        if model is None:
            model = build_model(task.model, tokenizer)
        report = run_training(stage, cfg, model, Path(data["artifacts"]["train"]), tokenizer=tokenizer,
                              progress=ctx.progress)
        if report.stopped_reason == "spike":
            return StepResult(outcome="spike", summary=f"{stage}: loss spike at step {report.proposal.spike_step}",
                              details={"stage": stage, "proposal": report.proposal.model_dump(mode="json")})
        final_dir = Path(report.final_dir)
        stage_metrics = {"final_loss": report.losses[-1][1] if report.losses else float("nan"),
                         "steps": float(report.steps_done),
                         **{k: float(v) for k, v in report.telemetry.items() if isinstance(v, (int, float))}}
        metrics.update({f"{stage}.{k}": v for k, v in stage_metrics.items()})
        curves[stage] = [list(x) for x in report.losses]
        parent = _checkpoint_node(ctx, final_dir, stage, data["nodes"]["train"], tok_node, parent, stage_metrics)
        model = final_dir
    return StepResult(
        summary=f"trained {' → '.join(stages)}; final loss {metrics.get(f'{stages[-1]}.final_loss', float('nan')):.4f}",
        artifacts={"checkpoint": str(final_dir), "tokenizer": str(tok_path)},
        metrics=metrics, nodes={"checkpoint": parent, **({"tokenizer": tok_node} if tok_node else {})},
        details={"stages": stages, "losses": curves},
    )
