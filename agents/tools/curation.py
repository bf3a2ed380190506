"""data_curator's curation tool: dedup, decontaminate against the eval set, filter quality."""

from __future__ import annotations

import json
from pathlib import Path

from trainteam.agents.tools.base import StepResult, ToolContext


def curation_config(task):
    """The task's curation settings, or defaults chosen for the kind of data.

    Verifiable problems (``12+34=`` / ``46``) are one short line each: text-quality
    heuristics and MinHash shingles say nothing about them, so the defaults keep exact
    dedup and decontamination (3-gram, whole record dropped) and turn the rest off.
    """
    from trainteam.curation import CurationConfig, DecontamConfig

    if task.curation is not None:
        return CurationConfig.model_validate(task.curation)
    if task.data.demo:
        return CurationConfig(quality=None, near_dedup=None,
                              decontam=DecontamConfig(ngram=3, min_words=3, mode="drop"))
    return CurationConfig()


def curate(ctx: ToolContext) -> StepResult:
    from trainteam.curation import curate as run_curation
    from trainteam.curation import read_jsonl

    prepared = ctx.output("prepare_corpus")
    raw = read_jsonl(Path(prepared["artifacts"]["train"]))
    corpus = [{**r, "text": r.get("text") or (r["prompt"] + r["completion"])} for r in raw]
    eval_path = prepared["artifacts"]["eval"]
    config = curation_config(ctx.task)
    report = run_curation(corpus, {"eval": eval_path}, config, graph=ctx.graph,
                          out_dir=_version_dir(ctx, corpus, eval_path, config), progress=ctx.progress)
    out_dir = Path(report.output).parent
    train_path = out_dir / "train.jsonl"
    if not train_path.exists():  # back to the trainers' record shape: prompt/completion (or text)
        with open(report.output) as src, open(train_path.with_suffix(".tmp"), "w") as dst:
            for line in src:
                rec = json.loads(line)
                meta = rec.get("meta") or {}
                row = ({"id": rec["id"], "prompt": meta["prompt"], "completion": meta["completion"]}
                       if "prompt" in meta and "completion" in meta else {"id": rec["id"], "text": rec["text"]})
                dst.write(json.dumps(row) + "\n")
        train_path.with_suffix(".tmp").rename(train_path)
    c = report.counts
    leaks = report.injected.get("leaks")
    caught = f"; caught {leaks.caught}/{leaks.injected} injected leaks" if leaks and leaks.injected else ""
    return StepResult(
        summary=(f"{c.get('input', 0)} → {c.get('output', 0)} records: {c.get('exact_duplicates', 0)} exact dups, "
                 f"{c.get('near_duplicates', 0)} near dups, {c.get('quality_dropped', 0)} low quality, "
                 f"{c.get('leak_dropped', 0) + c.get('leak_cut', 0)} eval leaks removed{caught}"),
        artifacts={"train": str(train_path), "eval": eval_path, "report": str(out_dir / "report.json")},
        metrics={f"curation.{k}": float(v) for k, v in c.items()},
        nodes={"train": report.node_id, "eval": prepared["nodes"]["eval"]},
        details={"version": report.version, "reused": report.reused,
                 "leaked_eval_examples": {k: v[:20] for k, v in report.leaked_eval_examples.items()},
                 "injected": {k: v.model_dump() for k, v in report.injected.items()}},
    )


def _version_dir(ctx: ToolContext, corpus, eval_path: str, config) -> Path:
    """Content-addressed output folder: the same inputs and settings land in the same place."""
    from trainteam.curation.pipeline import planned_version

    return ctx.ws.dir("datasets") / f"curated-{planned_version(corpus, {'eval': eval_path}, config)}"
