"""data_curator's curation tool: dedup, decontaminate against the eval sets, check and filter rows.

The filters fit the kind of rows (``curation.formats.row_kind``): pretraining text goes through
the text-quality filters; chat, prompt/completion and preference rows get the row-level checks of
``curation.row_checks`` instead (with over-length counted by the task's tokenizer against the
seq_len of the stages that train on them). A split that loses more than ``max_drop_fraction`` of
its rows stops the step: a person sees the rules and counts and says whether training goes on with
what is left (``accept_curation``). A split left empty is an error, never a training set.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import partial
from pathlib import Path
from typing import Any

from trainteam.contract.step_io import NeedsPerson, Resume, StepResult, ToolContext
from trainteam.core.errors import BadInput
from trainteam.curation import read_jsonl
from trainteam.curation.decontam import DecontamConfig
from trainteam.curation.formats import RowKind, row_kind
from trainteam.curation.lineage import DatasetFacts
from trainteam.curation.pipeline import CurationConfig, CurationReport, NothingKept, planned_version
from trainteam.curation.pipeline import curate as run_curation
from trainteam.curation.row_checks import RowChecksConfig, row_of, row_records
from trainteam.graph import KnowledgeGraph, NodeKind, node_id
from trainteam.graph.record import record_dataset, record_derived_from, recorded_dataset
from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.training.chat_templates import apply_chat_template
from trainteam.trainers.training.tokenizer import load_tokenizer
from trainteam.workflows.steps.corpus import eval_sets
from trainteam.workflows.task.curriculum import curriculum_from_task

_EXAMPLES = 3  # examples per rule in an approval's evidence


def default_config(kind: RowKind, demo: bool = False) -> CurationConfig:
    """The curation a split gets when the task says nothing, by the kind of its rows.

    - pretraining ``text``: every stage, the Gopher-style quality filters included;
    - ``pair`` / ``chat`` / ``preference`` rows: the row-level checks instead of text quality, exact
      and near dedup of the whole conversation, decontamination of the prompt side (13-grams; a
      shorter eval prompt of 3+ words matched whole; a leaking row is dropped);
    - the bundled demo (``12+34=`` / ``46``): one short line each, so no near dedup either, and
      decontamination compares whole problems, asked and answered (3 words: ``08+05=`` and
      ``08-05=`` share their two operands, not their answer). Its generator repeats problems by
      design (sampling with replacement), so exact duplicates are expected and the step never
      asks about the share removed.
    """
    if demo:
        return CurationConfig(
            quality=None,
            near_dedup=None,
            rows=RowChecksConfig(leaks_on="row"),
            max_drop_fraction=None,
            decontam=DecontamConfig(ngram=3, min_words=3, mode="drop"),
        )
    if kind == "text":
        return CurationConfig()
    return CurationConfig(quality=None, rows=RowChecksConfig(), decontam=DecontamConfig(mode="drop"))


def curation_config(task, kind: RowKind, data=None, max_tokens: int | None = None) -> CurationConfig:
    """The defaults for the kind of rows (``data``: a curriculum stage's own DataSpec; default the
    task's), with the task's ``curation:`` settings over them field by field (a setting given
    wins; a stage given, e.g. ``quality: {...}``, is that stage's whole config). ``max_tokens``:
    the seq_len the rows are trained at, for the over-length rule unless the task sets its own."""
    own = task.curation or {}
    config = CurationConfig.model_validate({**default_config(kind, bool((data or task.data).demo)).model_dump(), **own})
    said_rows: dict[str, Any] = own["rows"] if isinstance(own.get("rows"), dict) else {}
    if config.rows is not None and max_tokens is not None and "max_tokens" not in said_rows:
        config = config.model_copy(update={"rows": config.rows.model_copy(update={"max_tokens": max_tokens})})
    return config


def trained_seq_len(task, stage: str | None) -> int | None:
    """The shortest seq_len at which rows of this split are trained by a method that cuts longer
    rows (its record's ``cuts_rows``): the stages without data of their own read the task's split (``stage`` None)."""
    readers = [
        s
        for s in curriculum_from_task(task).stages
        if (s.data is None if stage is None else s.name == stage)
        and s.method is not None
        and get_method(s.method).cuts_rows
    ]
    return min((s.train_config().max_length for s in readers), default=None)


def split_kind(rows: list[dict], path: str) -> RowKind:
    """The kind of a split's rows (its first row's; prepare_corpus writes one kind a file)."""
    if not rows:
        raise BadInput(f"curate: {path}: no records")
    try:
        return row_kind(rows[0])
    except ValueError as exc:
        raise BadInput(f"curate: {path}: row 1: {exc}") from None


def planned_config(ctx: ToolContext) -> CurationConfig:
    """What curate will apply to the task's training split (the plan a curator reads first)."""
    train = ctx.output("prepare_corpus").artifact("train")
    with open(train) as fh:
        first = [json.loads(line) for line in [next(fh, "")] if line.strip()]
    max_tokens = trained_seq_len(ctx.task, None) if ctx.task.model.path is not None else None
    return curation_config(ctx.task, split_kind(first, str(train)), max_tokens=max_tokens)


def record_built(graph: KnowledgeGraph, facts: DatasetFacts) -> str:
    """A dataset version the data engine built, as a DatasetVersion node (derived_from its inputs,
    decontaminated_against the eval sets it was checked against)."""
    return record_dataset(
        graph,
        facts.key,
        path=facts.path,
        content_hash=facts.content_hash,
        counts=facts.counts,
        params=facts.params,
        inputs=facts.inputs,
        decontaminated_against=facts.checked_against,
        builder=facts.builder,
        report=facts.report,
    )


def curate_recorded(
    graph: KnowledgeGraph,
    corpus: Any,
    evals: Mapping[str, Any] | None,
    config: CurationConfig | None,
    out_dir: Path,
    progress: bool = True,
    tokenizer: Any = None,
) -> CurationReport:
    """``curate`` with its version in the knowledge graph: a version recorded before with its files
    intact is reused; a new one is recorded, and its report (``out_dir/report.json``) names its node."""
    report = run_curation(
        corpus,
        evals,
        config,
        recorded=partial(recorded_dataset, graph),
        out_dir=out_dir,
        progress=progress,
        tokenizer=tokenizer,
    )
    if report.facts is not None:
        report.node_id = record_built(graph, report.facts)
        if report.facts.report is None:
            raise RuntimeError(f"curate: dataset version {report.version} was built without a report path")
        Path(report.facts.report).write_text(report.model_dump_json(indent=1))
    elif report.node_id is None:  # reused, its report written before its node was recorded
        report.node_id = node_id(NodeKind.DATASET_VERSION, report.version)
    return report


_HINTS = {
    "quality": "curation: {quality: null} (the text-quality filters are for web text)",
    "rows.over_length": "a larger seq_len, or curation: {rows: {max_tokens: null}}",
    "exact_duplicates": "curation: {exact_dedup: false}",
    "near_duplicates": "curation: {near_dedup: null}",
    "eval_leaks": "an eval_path that is not the training data, or curation: {decontam: null}",
}


def _hint(rule: str) -> str:
    if rule.startswith("rows.") and rule != "rows.over_length":
        return f"curation: {{rows: {{{rule[5:]}: false}}}}"
    return _HINTS.get(rule.split(".")[0] if rule.startswith("quality.") else rule, "the task's curation settings")


def _curate_split(
    ctx: ToolContext, train: str, prepared_node: str, evals: dict[str, str], stage: str | None, data, tokenizer
) -> tuple[CurationReport, Path, CurationConfig]:
    """One training split through the chain, decontaminated against every eval set; returns the
    report, the curated rows (the canonical rows, unchanged) and the config applied. The curated
    version is linked to the prepared one, so its lineage reaches the corpus it came from."""
    raw = read_jsonl(Path(train))
    config = curation_config(
        ctx.task, split_kind(raw, train), data, trained_seq_len(ctx.task, stage) if tokenizer is not None else None
    )
    corpus = list(row_records(raw, Path(train).name))
    tok = tokenizer if config.rows is not None and config.rows.max_tokens is not None else None
    try:
        report = curate_recorded(
            ctx.graph,
            corpus,
            evals,
            config,
            _version_dir(ctx, corpus, evals, config, tok),
            progress=ctx.progress,
            tokenizer=tok,
        )
    except NothingKept as exc:  # an empty training set would fail three steps later, unexplained
        hints = "; ".join(dict.fromkeys(f"{rule}: {_hint(rule)}" for rule in exc.report.removed()))
        raise BadInput(
            f"curate: {train}: no training record is left of {exc.report.counts.get('input', 0)} "
            f"({exc.report.removed_text()}); loosen the rule that removed them ({hints or 'see the report'})"
        ) from None
    if report.node_id is None or report.output is None:  # curate_recorded records it; an out_dir was given
        raise RuntimeError(f"curate: {train}: dataset version {report.version} was not recorded or written")
    record_derived_from(ctx.graph, report.node_id, prepared_node)
    out_dir = Path(report.output).parent
    train_path = out_dir / "train.jsonl"
    if not train_path.exists():  # back to the canonical rows the trainers read
        with open(report.output) as src, open(train_path.with_suffix(".tmp"), "w") as dst:
            for line in src:
                rec = json.loads(line)
                dst.write(json.dumps({"id": rec["id"], **row_of(rec)}, ensure_ascii=False) + "\n")
        train_path.with_suffix(".tmp").rename(train_path)
    return report, train_path, config


def _summary(report) -> str:
    c = report.counts
    leaks = report.injected.get("leaks")
    caught = f"; caught {leaks.caught}/{leaks.injected} injected leaks" if leaks and leaks.injected else ""
    rows = f"{c.get('row_dropped', 0)} failed row checks, " if report.row_dropped else ""
    return (
        f"{c.get('input', 0)} → {c.get('output', 0)} records: {rows}{c.get('exact_duplicates', 0)} exact dups, "
        f"{c.get('near_duplicates', 0)} near dups, {c.get('quality_dropped', 0)} low quality, "
        f"{c.get('leak_dropped', 0) + c.get('leak_cut', 0)} eval leaks removed{caught}"
    )


def _tokenizer(task):
    """The task's tokenizer when it continues a local model; None when it trains its own (after
    curation: the over-length rule waits for the trainer then)."""
    if task.model.path is None:
        return None
    tok = load_tokenizer(task.model.path)
    if task.model.chat_template:  # the template training uses (its tools count towards the rows' tokens)
        apply_chat_template(tok, task.model.chat_template)
    return tok


def _splits(ctx: ToolContext) -> list[tuple[str, str | None, Any]]:
    """(artifact prefix, stage, DataSpec) of every training split: the task's, then each stage's own."""
    own = [(f"{s.name}.", s.name, s.data) for s in curriculum_from_task(ctx.task).stages if s.data is not None]
    return [("", None, ctx.task.data), *own]


def curate(ctx: ToolContext) -> StepResult:
    """The task's training data and each curriculum stage's own, each checked against every
    held-out set of the run (a checkpoint is measured on the eval set of each stage it went
    through, so no training set may hold any of them). A split that lost more than its
    ``max_drop_fraction`` waits for a person, unless one already accepted it (``decided``)."""
    prepared = ctx.output("prepare_corpus")
    evals = eval_sets(ctx)
    tokenizer = _tokenizer(ctx.task)
    artifacts, metrics, nodes, summaries = {}, {}, {}, []
    details: dict[str, Any] = {}
    over: dict[str, tuple[CurationReport, CurationConfig]] = {}
    for prefix, stage, data in _splits(ctx):
        report, path, config = _curate_split(
            ctx, prepared.artifacts[f"{prefix}train"], prepared.node(f"{prefix}train"), evals, stage, data, tokenizer
        )
        out_dir = path.parent  # the curated version's folder (train.jsonl sits beside its output)
        artifacts.update(
            {
                f"{prefix}train": str(path),
                f"{prefix}eval": prepared.artifacts[f"{prefix}eval"],
                f"{prefix}report": str(out_dir / "report.json"),
            }
        )
        nodes.update({f"{prefix}train": report.node_id, f"{prefix}eval": prepared.node(f"{prefix}eval")})
        metrics.update({f"curation.{prefix}{k}": float(v) for k, v in report.counts.items()})
        summaries.append(f"{stage}: {_summary(report)}" if stage else _summary(report))
        if stage:
            details.setdefault("stages", {})[stage] = {"version": report.version, "reused": report.reused}
            details.setdefault("stages_removed", {})[stage] = report.removed(_EXAMPLES)
        else:
            details.update(
                {
                    "version": report.version,
                    "reused": report.reused,
                    "removed": report.removed(_EXAMPLES),
                    "over_length": _over_length_note(config, tokenizer),
                    "leaked_eval_examples": {k: v[:20] for k, v in report.leaked_eval_examples.items()},
                    "injected": {k: v.model_dump() for k, v in report.injected.items()},
                }
            )
        limit = config.max_drop_fraction
        if limit is not None and report.drop_fraction() > limit:
            over[f"{prefix}train"] = (report, config)
    summary = "; ".join(summaries)
    accepted = ctx.decided.accepted_curation
    if over and accepted is None:
        return StepResult(
            outcome="too_much_dropped",
            summary=f"{summary}; {_over_text(over)}",
            artifacts=artifacts,
            metrics=metrics,
            nodes=nodes,
            details=details,
            needs=_ask(ctx, over, artifacts),
        )
    if over and accepted is not None:
        details["accepted_by"] = accepted.model_dump(mode="json")
    return StepResult(summary=summary, artifacts=artifacts, metrics=metrics, nodes=nodes, details=details)


def _over_length_note(config: CurationConfig, tokenizer) -> str:
    if config.rows is None:
        return "not checked: text records"
    if config.rows.max_tokens is not None:
        return f"rows over {config.rows.max_tokens} tokens dropped (the task's tokenizer)"
    if tokenizer is None:
        return "not checked: the tokenizer is trained after curation"
    return "not checked: no stage cuts these rows at a seq_len (or the task switched it off)"


def _over_text(over: dict[str, tuple[CurationReport, CurationConfig]]) -> str:
    return "; ".join(
        f"{key} lost {r.drop_fraction():.0%} of its rows (max_drop_fraction {c.max_drop_fraction:g}): "
        "a person decides whether training goes on with what is left"
        for key, (r, c) in over.items()
    )


def _ask(
    ctx: ToolContext, over: dict[str, tuple[CurationReport, CurationConfig]], artifacts: dict[str, str]
) -> NeedsPerson:
    """The question for a person: train on what curation left? The rules that removed rows, with
    their counts and a few examples, for each split over its limit."""
    splits = {}
    for key, (r, c) in over.items():
        removed = r.removed(_EXAMPLES)
        splits[key] = {
            "input": r.counts.get("input", 0),
            "output": r.counts.get("output", 0),
            "removed_fraction": round(r.drop_fraction(), 4),
            "max_drop_fraction": c.max_drop_fraction,
            "rules": {rule: v["count"] for rule, v in removed.items()},
            "examples": {rule: v["examples"] for rule, v in removed.items()},
            "report": artifacts[key.removesuffix("train") + "report"],
        }
    return NeedsPerson(
        action="accept_curation",
        requested_by=ctx.persona,
        refused="training on what curation left",
        proposed={"train_on": {key: s["output"] for key, s in splits.items()}},
        evidence={"splits": splits},
        resume=Resume(kind="accept_curation"),
    )


def _version_dir(ctx: ToolContext, corpus, evals: dict[str, str], config, tokenizer=None) -> Path:
    """Content-addressed output folder: the same inputs and settings land in the same place."""
    return ctx.ws.dir("datasets") / f"curated-{planned_version(corpus, evals, config, tokenizer)}"
