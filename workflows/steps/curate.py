"""data_curator's curation tool: dedup, decontaminate against the eval sets, filter quality."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import Any, Mapping

from trainteam.agents.toolbox import StepResult, ToolContext
from trainteam.core.errors import BadInput
from trainteam.curation import read_jsonl
from trainteam.curation.decontam import DecontamConfig
from trainteam.curation.lineage import DatasetFacts
from trainteam.curation.pipeline import CurationConfig, CurationReport, planned_version
from trainteam.curation.pipeline import curate as run_curation
from trainteam.graph import KnowledgeGraph, NodeKind, node_id
from trainteam.graph.record import record_dataset, record_derived_from, recorded_dataset
from trainteam.workflows.curriculum import curriculum_from_task
from trainteam.workflows.steps.corpus import eval_sets


def curation_config(task, data=None):
    """The task's curation settings, or defaults chosen for the kind of data (``data``:
    a curriculum stage's own DataSpec; default the task's).

    Verifiable problems (``12+34=`` / ``46``) are one short line each: text-quality
    heuristics and MinHash shingles say nothing about them, so the defaults keep exact
    dedup and decontamination (3-gram, whole record dropped) and turn the rest off.
    """
    if task.curation is not None:
        return CurationConfig.model_validate(task.curation)
    if (data or task.data).demo:
        return CurationConfig(quality=None, near_dedup=None,
                              decontam=DecontamConfig(ngram=3, min_words=3, mode="drop"))
    return CurationConfig()


def record_built(graph: KnowledgeGraph, facts: DatasetFacts) -> str:
    """A dataset version the data engine built, as a DatasetVersion node (derived_from its inputs,
    decontaminated_against the eval sets it was checked against)."""
    return record_dataset(graph, facts.key, path=facts.path, content_hash=facts.content_hash, counts=facts.counts,
                          params=facts.params, inputs=facts.inputs, decontaminated_against=facts.checked_against,
                          builder=facts.builder, report=facts.report)


def curate_recorded(graph: KnowledgeGraph, corpus: Any, evals: Mapping[str, Any] | None,
                    config: CurationConfig | None, out_dir: Path, progress: bool = True) -> CurationReport:
    """``curate`` with its version in the knowledge graph: a version recorded before with its files
    intact is reused; a new one is recorded, and its report (``out_dir/report.json``) names its node."""
    report = run_curation(corpus, evals, config, recorded=partial(recorded_dataset, graph), out_dir=out_dir,
                          progress=progress)
    if report.facts is not None:
        report.node_id = record_built(graph, report.facts)
        Path(report.facts.report).write_text(report.model_dump_json(indent=1))
    elif report.node_id is None:  # reused, its report written before its node was recorded
        report.node_id = node_id(NodeKind.DATASET_VERSION, report.version)
    return report


def _curate_split(ctx: ToolContext, train: str, prepared_node: str, evals: dict[str, str], config):
    """One training split through the chain, decontaminated against every eval set;
    returns the report and the curated file in the trainers' record shape. The curated
    version is linked to the prepared one, so its lineage reaches the corpus it came from."""
    raw = read_jsonl(Path(train))
    corpus = [{**r, "text": r.get("text") or (r["prompt"] + r["completion"])} for r in raw]
    report = curate_recorded(ctx.graph, corpus, evals, config, _version_dir(ctx, corpus, evals, config),
                             progress=ctx.progress)
    record_derived_from(ctx.graph, report.node_id, prepared_node)
    if not report.counts.get("output"):  # an empty training set would fail three steps later, unexplained
        raise BadInput(f"curate: no training record is left ({_summary(report)}); loosen the filter that "
                       "removed them in the task's curation settings (e.g. curation: {quality: null} for "
                       "short prompt/completion rows)")
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
    return report, train_path


def _summary(report) -> str:
    c = report.counts
    leaks = report.injected.get("leaks")
    caught = f"; caught {leaks.caught}/{leaks.injected} injected leaks" if leaks and leaks.injected else ""
    return (f"{c.get('input', 0)} → {c.get('output', 0)} records: {c.get('exact_duplicates', 0)} exact dups, "
            f"{c.get('near_duplicates', 0)} near dups, {c.get('quality_dropped', 0)} low quality, "
            f"{c.get('leak_dropped', 0) + c.get('leak_cut', 0)} eval leaks removed{caught}")


def curate(ctx: ToolContext) -> StepResult:
    """The task's training data and each curriculum stage's own, each checked against every
    held-out set of the run (a checkpoint is measured on the eval set of each stage it went
    through, so no training set may hold any of them)."""
    prepared = ctx.output("prepare_corpus")
    evals = eval_sets(ctx)
    report, train_path = _curate_split(ctx, prepared["artifacts"]["train"], prepared["nodes"]["train"], evals,
                                       curation_config(ctx.task))
    out_dir = Path(report.output).parent
    artifacts = {"train": str(train_path), "eval": prepared["artifacts"]["eval"], "report": str(out_dir / "report.json")}
    metrics = {f"curation.{k}": float(v) for k, v in report.counts.items()}
    nodes = {"train": report.node_id, "eval": prepared["nodes"]["eval"]}
    summary = _summary(report)
    details = {"version": report.version, "reused": report.reused,
               "leaked_eval_examples": {k: v[:20] for k, v in report.leaked_eval_examples.items()},
               "injected": {k: v.model_dump() for k, v in report.injected.items()}}
    for s in curriculum_from_task(ctx.task).stages:
        if s.data is None:
            continue
        rep, path = _curate_split(ctx, prepared["artifacts"][f"{s.name}.train"], prepared["nodes"][f"{s.name}.train"],
                                  evals, curation_config(ctx.task, s.data))
        artifacts.update({f"{s.name}.train": str(path), f"{s.name}.eval": prepared["artifacts"][f"{s.name}.eval"],
                          f"{s.name}.report": str(Path(rep.output).parent / "report.json")})
        nodes.update({f"{s.name}.train": rep.node_id, f"{s.name}.eval": prepared["nodes"][f"{s.name}.eval"]})
        metrics.update({f"curation.{s.name}.{k}": float(v) for k, v in rep.counts.items()})
        summary += f"; {s.name}: {_summary(rep)}"
        details.setdefault("stages", {})[s.name] = {"version": rep.version, "reused": rep.reused}
    return StepResult(summary=summary, artifacts=artifacts, metrics=metrics, nodes=nodes, details=details)


def _version_dir(ctx: ToolContext, corpus, evals: dict[str, str], config) -> Path:
    """Content-addressed output folder: the same inputs and settings land in the same place."""
    return ctx.ws.dir("datasets") / f"curated-{planned_version(corpus, evals, config)}"
