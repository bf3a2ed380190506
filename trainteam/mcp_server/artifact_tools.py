"""MCP tools that make or check one artifact, outside a run: ``train_tokenizer``,
``merge_adapters_ties``, ``build_training_dataset``, ``compose_reward``, ``dataset_lineage`` and ``export_model``.

Each makes what the matching part of a run makes, with the same code (``trainers.tokenizer``,
``trainers.merge`` on PEFT's ``add_weighted_adapter``, ``workflows.built_datasets``, the GRPO
step's reward functions in ``curation.rewards``) and records it in the knowledge graph. The ones
that write are plan-first: without ``execute: true`` a call returns the plan (what would be read,
where it would go) and stores nothing. ``compose_reward`` only scores the samples it is given.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainteam.contract.step_io import PlanFirstArgs
from trainteam.core.errors import BadInput, NotFound
from trainteam.core.hashing import weights_hash
from trainteam.curation.answers import AnswerSpec
from trainteam.curation.lineage import source_fingerprint
from trainteam.curation.rewards import RewardWeights, exact_answer_reward, format_reward, score_reward
from trainteam.curation.rows import iter_rows
from trainteam.graph import NodeKind, node_id
from trainteam.graph.knowledge import UnknownNode
from trainteam.graph.record import record_fitted_tokenizer, record_merged_checkpoint
from trainteam.trainers.export.exporter import ExportRequest
from trainteam.trainers.methods.grpo import METHOD as GRPO  # compose_reward shows GRPO's own rewards
from trainteam.trainers.training.config import TokenizerConfig
from trainteam.trainers.training.merge import check_adapters, merge_adapters
from trainteam.trainers.training.tokenizer import load_tokenizer
from trainteam.trainers.training.tokenizer import train_tokenizer as fit
from trainteam.workflows.improve.built_datasets import BuildKind, BuildOptions, build_recorded, planned_build
from trainteam.workflows.report.model_export import plan_export, run_export

MAX_SAMPLES = 1000


def _plan(tool: str, **plan: Any) -> dict[str, Any]:
    return {"executed": False, "tool": tool, "plan": plan, "next": f"call {tool} again with execute: true to run it"}


def _existing(path: str, field: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise BadInput(f"{field}: {path}: no such file or folder")
    return p


# ------------------------------------------------------------------ tokenizer


class TrainTokenizerArgs(PlanFirstArgs):
    """Fit a byte-level BPE tokenizer (digits one per token by default) on a corpus's rows, as a run's
    train_tokenizer step does; recorded as a Tokenizer node derived from the corpus."""

    corpus: str = Field(description=".jsonl / .txt / .parquet file, a folder of them, or a saved HF dataset")
    config: TokenizerConfig = Field(default_factory=TokenizerConfig)
    out: str | None = Field(None, description="output folder (default: the workspace's tokenizers/<key>)")


def _texts(value: Any) -> Iterator[str]:
    """Every string a row holds (text, prompt, completion, each message's content, chosen, rejected)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key in ("text", "prompt", "completion", "content", "messages", "chosen", "rejected"):
            if key in value:
                yield from _texts(value[key])
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


def train_tokenizer(ws, args: TrainTokenizerArgs) -> dict[str, Any]:
    corpus = _existing(args.corpus, "corpus")
    fp = source_fingerprint(corpus)
    if fp is None:  # a file or folder always has one
        raise BadInput(f"corpus: {corpus}: cannot fingerprint its content")
    key = hashlib.sha256(f"{fp}\0{args.config.model_dump_json()}".encode()).hexdigest()[:16]
    out = Path(args.out).expanduser() if args.out else ws.dir("tokenizers") / key
    reused = (out / "tokenizer.json").exists()
    if not args.execute:
        return _plan(
            "train_tokenizer",
            corpus=str(corpus),
            out=str(out),
            key=key,
            reuses_existing=reused,
            config=args.config.model_dump(mode="json"),
        )
    if not reused:
        fit((t for row in iter_rows(corpus) for t in _texts(row.record)), args.config, out)
    node = record_fitted_tokenizer(
        ws.graph,
        key,
        inputs=[(fp, str(corpus))],
        path=str(out),
        vocab_size=args.config.vocab_size,
        split_digits=args.config.split_digits,
    )
    return {
        "executed": True,
        "tool": "train_tokenizer",
        "path": str(out),
        "node_id": node,
        "reused": reused,
        "vocab_size": len(load_tokenizer(out)),
    }


# ------------------------------------------------------------------ adapters


class MergeAdaptersArgs(PlanFirstArgs):
    """Merge LoRA adapters of one base into one full model (PEFT's TIES by default: each adapter's delta
    trimmed to its density largest entries, a sign elected per parameter, the agreeing entries averaged);
    saved as safetensors and recorded as a Checkpoint derived from each adapter's checkpoint."""

    adapters: list[str] = Field(min_length=2, description="PEFT adapter folders (adapter_config.json), one base")
    combination: Literal["ties", "dare_ties", "linear", "cat", "magnitude_prune"] = "ties"
    weights: list[float] | None = Field(None, description="one per adapter (default: 1 each)")
    density: float = Field(0.5, gt=0, le=1, description="ties / dare_ties / magnitude_prune: the share kept")
    out: str | None = Field(None, description="output folder (default: the workspace's models/merged-<key>)")


def _adapter_plan(args: MergeAdaptersArgs) -> list[dict[str, Any]]:
    paths = [_existing(a, f"adapters[{i}]").resolve() for i, a in enumerate(args.adapters)]
    configs = check_adapters(paths, args.weights)
    return [
        {"path": str(p), "base": c.get("base_model_name_or_path"), "r": c.get("r")}
        for p, c in zip(paths, configs, strict=True)
    ]


def merge_adapters_ties(ws, args: MergeAdaptersArgs) -> dict[str, Any]:
    rows = _adapter_plan(args)
    weights = list(args.weights or [1.0] * len(rows))
    key = hashlib.sha256(
        "\0".join([*(r["path"] for r in rows), args.combination, str(args.density), *map(str, weights)]).encode()
    ).hexdigest()[:12]
    out = Path(args.out).expanduser() if args.out else ws.dir("models") / f"merged-{key}"
    if not args.execute:
        return _plan(
            "merge_adapters_ties",
            adapters=rows,
            combination=args.combination,
            density=args.density,
            weights=weights,
            out=str(out),
        )
    tokenizer = load_tokenizer(Path(rows[0]["path"])) if (Path(rows[0]["path"]) / "tokenizer.json").exists() else None
    merge_adapters(
        [Path(r["path"]) for r in rows],
        out,
        combination_type=args.combination,
        weights=weights,
        density=args.density,
        tokenizer=tokenizer,
    )
    digest = weights_hash(out)
    node = record_merged_checkpoint(
        ws.graph,
        digest[:16],
        path=str(out),
        adapters=[r["path"] for r in rows],
        combination=args.combination,
        density=args.density,
        weights=weights,
    )
    return {"executed": True, "tool": "merge_adapters_ties", "path": str(out), "weights_hash": digest, "node_id": node}


# ------------------------------------------------------------------ datasets


class BuildTrainingDatasetArgs(PlanFirstArgs):
    """Build a training dataset from traces or scored samples: sft (successful traces as prompt/completion
    or chat rows), preference (chosen/rejected pairs by reward gap), grpo (groups with advantages);
    recorded as a DatasetVersion derived from the source, built once per source and options."""

    kind: BuildKind
    source: str = Field(description=".jsonl of traces (sft) or scored samples {prompt, completion, reward}")
    options: BuildOptions = Field(default_factory=BuildOptions)
    out: str | None = Field(None, description="output folder (default: the workspace's datasets)")


def build_training_dataset(ws, args: BuildTrainingDatasetArgs) -> dict[str, Any]:
    source = Path(args.source).expanduser()
    version = planned_build(args.kind, source, args.options)
    out = Path(args.out).expanduser() if args.out else ws.dir("datasets")
    if not args.execute:
        return _plan(
            "build_training_dataset",
            kind=args.kind,
            source=str(source),
            version=version,
            path=str(out / f"{version}.jsonl"),
            options=args.options.model_dump(mode="json"),
        )
    built = build_recorded(ws.graph, args.kind, source, args.options, out)
    return {"executed": True, "tool": "build_training_dataset", **built.model_dump(mode="json")}


class DatasetLineageArgs(BaseModel):
    """A dataset version's lineage: the versions and corpora it was derived from, what it was
    decontaminated against, and the checkpoints trained on it (read-only)."""

    model_config = ConfigDict(extra="forbid")
    version: str = Field(description="a dataset version (e.g. curated-1a2b...) or its node id")


def dataset_lineage(ws, args: DatasetLineageArgs) -> dict[str, Any]:
    ref = (
        args.version
        if args.version.startswith(f"{NodeKind.DATASET_VERSION.value}:")
        else node_id(NodeKind.DATASET_VERSION, args.version)
    )
    try:
        sub = ws.graph.lineage(ref)
    except UnknownNode:
        raise NotFound(f"version: no dataset version {args.version!r} in the knowledge graph") from None
    full = ws.graph.to_networkx()
    trained = sorted(u for u, _, k in full.in_edges(ref, keys=True) if k == "trained_on")
    nodes = sorted(sub.nodes(data=True), key=lambda x: (x[1]["kind"], x[0]))
    return {
        "version": ref,
        "nodes": [{"id": n, **d} for n, d in nodes],
        "edges": [{"src": u, "dst": v, "kind": k} for u, v, k in sub.edges(keys=True)],
        "trained_checkpoints": trained,
    }


# ------------------------------------------------------------------ rewards


class RewardSample(BaseModel):
    model_config = ConfigDict(extra="forbid")
    completion: str = Field(max_length=100_000)
    reference: str = Field(max_length=100_000)
    ended_with_eos: bool = Field(True, description="whether the model closed the completion with its EOS token")


class ComposeRewardArgs(BaseModel):
    """Score completions against references with an answer spec, through the rewards a grpo stage trains
    on (a correct answer: 1; a well-formed answer closed by EOS: 0.2) and the weighted composite that
    ranks DPO pairs (exact, format, length). Put the spec in the task's answer field to train with it."""

    model_config = ConfigDict(extra="forbid")
    answer: AnswerSpec = Field(default_factory=AnswerSpec, description="how an answer is checked")
    weights: RewardWeights = Field(default_factory=RewardWeights, description="the composite's weights")
    samples: list[RewardSample] = Field(min_length=1, max_length=MAX_SAMPLES)


def compose_reward(args: ComposeRewardArgs) -> dict[str, Any]:
    completions = [s.completion for s in args.samples]
    refs = [s.reference for s in args.samples]
    exact = exact_answer_reward(args.answer)(completions, refs)
    ids = [[0] if s.ended_with_eos else [1] for s in args.samples]  # EOS is id 0 here
    fmt = format_reward(0, args.answer)(completions, completion_ids=ids)
    rows = [
        {
            GRPO.name: {"exact_answer": e, "well_formed": f, "total": e + f},
            "composite": score_reward(s.completion, s.reference, args.weights, args.answer).model_dump(),
        }
        for s, e, f in zip(args.samples, exact, fmt, strict=True)
    ]
    n = len(rows)
    return {
        "samples": rows,
        "mean_grpo_total": sum(r[GRPO.name]["total"] for r in rows) / n,
        "mean_composite": sum(r["composite"]["total"] for r in rows) / n,
        "correct": sum(1 for e in exact if e >= 1.0),
        "of": n,
    }


# ------------------------------------------------------------------ export


class ExportModelArgs(PlanFirstArgs):
    """Write a registered model as GGUF (llama.cpp), an Ollama folder (GGUF + Modelfile) or a Hugging Face folder
    with its card, and read it back against the registered model on its run's held-out rows before it is done;
    recorded as an Export node of the Model. Plan-first: without execute, every check runs and nothing is written."""

    model: str = Field(description="a registered model's id, unique id prefix or name")
    format: Literal["gguf", "hf", "ollama"]
    out: str = Field(description="the folder to create (it must not exist)")
    quant: Literal["f16", "q8_0"] = Field("f16", description="gguf, ollama: the tensor type")
    rows: str | None = Field(None, description="answered rows to check on (default: the model's run's held-out rows)")


def export_model(ws, args: ExportModelArgs) -> dict[str, Any]:
    request = ExportRequest(format=args.format, quant=args.quant, out=Path(args.out))
    planned = plan_export(ws, args.model, request, Path(args.rows).expanduser() if args.rows else None)
    if not args.execute:
        return _plan("export_model", **planned.plan.model_dump())
    result = run_export(ws, planned, lambda _line: None)
    return {"executed": True, "tool": "export_model", **result.model_dump(mode="json")}
