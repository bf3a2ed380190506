"""data_curator's tools: bring the corpus in as versioned datasets.

A curriculum stage may name its own data (a different demo mix, other files): it is
prepared here beside the task's data, as its own dataset versions, so that curation
checks every training set against every eval set and the training step only reads
what the data steps recorded. The helpers at the end say where a stage's data is.

A user's data (any file or folder ``trainteam.curation.rows`` reads, in any of its column
shapes) is written as canonical rows. Its held-out rows are ``eval_path``'s, or the data's
own validation/test split, or else a seeded share of its rows (``data.eval_fraction``,
``data.seed``; ``curation.splits.held_out``); which one is recorded in the corpus node's
params and the step's ``details.eval_from``.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from trainteam.contract.step_io import StepResult, ToolContext
from trainteam.core.hashing import file_fingerprint, sha256_file
from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic, read_jsonl, write_jsonl
from trainteam.curation.rows import iter_rows
from trainteam.curation.splits import Part, SealedSplit, SplitPlan, held_out, plan_splits, seal_test
from trainteam.graph.record import record_corpus, record_split
from trainteam.workflows.task.curriculum import curriculum_from_task

ROWS_FORMAT = 1  # how rows.py shapes rows: a change bumps it, so folders prepared before are not reused


@dataclass(frozen=True)
class Prepared:
    """One DataSpec as files in the workspace, and where its held-out rows came from."""

    corpus: str  # the Corpus node
    folder: Path
    train: Path
    eval: Path
    eval_from: str  # "demo", "eval_path", "split <name>" or "held out <fraction> (seed <seed>)"


def _write_folder(folder: Path, write) -> None:
    """``write(tmp)`` fills a temporary folder that then replaces ``folder``: a crash mid-write
    leaves no half dataset behind."""
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    write(tmp)
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)


def _prepare(ctx: ToolContext, data) -> Prepared:
    """One DataSpec as files in the workspace: the demo generated, or the user's data read."""
    if not data.demo:
        return _prepare_files(ctx, data)
    cfg = ArithmeticConfig(
        task=data.demo,
        max_operand=data.max_operand,
        n_train=data.n_train,
        n_eval=data.n_eval,
        seed=data.seed,
        fixed_width=data.fixed_width,
    )
    params = {**cfg.model_dump(), "inject_leaks": data.inject_leaks}
    key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
    corpus = record_corpus(ctx.graph, f"demo-{key}", source="demo", generator="arithmetic", params=params)
    folder = ctx.ws.dir("datasets") / f"demo-{key}"
    train_path, eval_path = folder / "train.jsonl", folder / "eval.jsonl"
    if not (train_path.exists() and eval_path.exists()):
        train, held_out_rows = generate_arithmetic(cfg)
        # Injected leaks (demo only): eval problems planted in the training split, marked
        # so the curation report can say how many it caught.
        train += [{**ex, "id": f"leak-{ex['id']}", "leak_of": ex["id"]} for ex in held_out_rows[: data.inject_leaks]]

        def write(tmp: Path) -> None:
            write_jsonl(train, tmp / "train.jsonl")
            write_jsonl(held_out_rows, tmp / "eval.jsonl")

        _write_folder(folder, write)
    return Prepared(corpus, folder, train_path, eval_path, "demo")


def _prepare_files(ctx: ToolContext, data) -> Prepared:
    """The user's file or folder read as canonical rows (``curation.rows``) into ``train.jsonl`` /
    ``eval.jsonl``, in a folder named by the hash of the inputs' bytes and of how they are read
    (split, columns, held-out share): the same inputs are read once."""
    plan = plan_splits(data.path, data.eval_path, split=data.split, eval_split=data.eval_split)
    if data.eval_path is not None:
        eval_from = "eval_path"
    elif plan.eval is not None:
        eval_from = f"split {plan.eval.split}"
    else:
        eval_from = f"held out {data.eval_fraction:g} (seed {data.seed})"
    params = {
        "split": plan.train.split,
        "eval_split": plan.eval.split if plan.eval else None,
        "columns": dict(data.columns),
        "eval_from": eval_from,
        "rows_format": ROWS_FORMAT,
    }
    inputs = {
        "train": file_fingerprint(data.path),
        "eval": file_fingerprint(data.eval_path) if data.eval_path is not None else None,
    }
    key = hashlib.sha256(json.dumps({**params, **inputs}, sort_keys=True).encode()).hexdigest()[:16]
    corpus = record_corpus(
        ctx.graph,
        f"files-{key}",
        source="files",
        path=str(data.path),
        eval_path=str(plan.eval.path) if plan.eval else None,
        params=params,
    )
    folder = ctx.ws.dir("datasets") / f"files-{key}"
    train_path, eval_path = folder / "train.jsonl", folder / "eval.jsonl"
    if not (train_path.exists() and eval_path.exists()):
        _write_folder(folder, lambda tmp: _write_rows(data, plan, tmp))
    return Prepared(corpus, folder, train_path, eval_path, eval_from)


def _write_rows(data, plan: SplitPlan, tmp: Path) -> None:
    def rows(part: Part):
        return (
            r.record
            for r in iter_rows(part.path, columns=data.columns, split=part.split, max_row_bytes=data.max_row_bytes)
        )

    if plan.eval is not None:
        write_jsonl(rows(plan.train), tmp / "train.jsonl")
        write_jsonl(rows(plan.eval), tmp / "eval.jsonl")
        return
    held = held_out(sum(1 for _ in rows(plan.train)), data.eval_fraction, data.seed)
    write_jsonl((r for i, r in enumerate(rows(plan.train)) if i not in held), tmp / "train.jsonl")
    write_jsonl((r for i, r in enumerate(rows(plan.train)) if i in held), tmp / "eval.jsonl")


def _versions(ctx: ToolContext, corpus: str, paths: dict[str, Path], stage: str | None) -> tuple[dict, dict]:
    nodes, counts = {}, {}
    for split, path in paths.items():
        digest = sha256_file(path)
        counts[split] = sum(1 for _ in open(path))
        nodes[split] = record_split(
            ctx.graph,
            digest[:16],
            corpus=corpus,
            split=split,
            path=str(path),
            sha256=digest,
            records=counts[split],
            stage=stage or None,
        )
    return nodes, counts


def _seal(prepared: Prepared, seed: int) -> tuple[dict[str, Path], SealedSplit]:
    """The task's held-out rows cut into ``dev.jsonl`` (the ``eval`` every deciding step reads) and a sealed
    ``test.jsonl`` (``curation.splits.seal_test``), beside them in the prepared folder; too few rows: all dev."""
    rows = read_jsonl(prepared.eval)
    cut = seal_test(len(rows), seed)
    if not cut.test:
        return {"eval": prepared.eval}, cut
    dev, test = prepared.folder / "dev.jsonl", prepared.folder / "test.jsonl"
    if not (dev.exists() and test.exists()):
        for path, part in ((dev, cut.dev), (test, cut.test)):
            tmp = path.with_suffix(".tmp")
            write_jsonl([rows[i] for i in part], tmp)
            tmp.replace(path)
    return {"eval": dev, "test": test}, cut


def prepare_corpus(ctx: ToolContext) -> StepResult:
    """Generate the bundled verifiable demo data, or read the task's own data as canonical
    rows, as content-addressed dataset versions (the same inputs never do the work twice); the
    same for each curriculum stage that names its own data (keys ``<stage>.train`` ...). The task's
    held-out rows are cut into the dev part (``eval``) and a sealed test part (``test``, ``_seal``)."""
    main = _prepare(ctx, ctx.task.data)
    held, cut = _seal(main, ctx.task.data.seed)
    nodes, counts = _versions(ctx, main.corpus, {"train": main.train, **held}, None)
    artifacts = {"train": str(main.train), **{k: str(v) for k, v in held.items()}}
    metrics = {"n_train": counts["train"], "n_eval": counts["eval"]}
    if "test" in counts:
        metrics["n_test"] = counts["test"]
    nodes = {"corpus": main.corpus, **nodes}
    summary = f"{counts['train']} training and {counts['eval']} held-out problems ({main.folder.name}{_how(main)})"
    if "test" in counts:
        summary += f"; {counts['test']} more sealed as the test part, scored once at the end"
    eval_from = {"eval": main.eval_from}
    own = [s for s in curriculum_from_task(ctx.task).stages if s.data is not None]
    for s in own:
        p = _prepare(ctx, s.data)
        s_nodes, s_counts = _versions(ctx, p.corpus, {"train": p.train, "eval": p.eval}, s.name)
        for split in ("train", "eval"):
            artifacts[f"{s.name}.{split}"] = str(p.train if split == "train" else p.eval)
            nodes[f"{s.name}.{split}"] = s_nodes[split]
            metrics[f"{s.name}.n_{split}"] = s_counts[split]
        nodes[f"{s.name}.corpus"] = p.corpus
        eval_from[f"{s.name}.eval"] = p.eval_from
        summary += f"; {s.name}: {s_counts['train']} / {s_counts['eval']} ({p.folder.name}{_how(p)})"
    return StepResult(
        summary=summary,
        artifacts=artifacts,
        metrics=metrics,
        nodes=nodes,
        details={"stage_data": [s.name for s in own], "eval_from": eval_from, "sealed_test": cut.why},
    )


def _how(p: Prepared) -> str:
    return f", {p.eval_from}" if p.eval_from not in ("demo", "eval_path") else ""


# -- where a stage's data is -------------------------------------------------------------------


def _prefix(stage) -> str:
    return f"{stage.name}." if stage is not None and stage.data is not None else ""


def stage_train_data(ctx: ToolContext, stage) -> tuple[Path, str]:
    """(train file, DatasetVersion node) a stage trains on: its own data when it has some,
    else the task's; the curated version when curation ran, else the prepared one."""
    key = _prefix(stage) + "train"
    for step in ("curate", "prepare_corpus"):
        out = ctx.ran(step)
        if out is not None and key in out.artifacts:
            return out.artifact(key), out.node(key)
    raise LookupError(f"step {ctx.step!r} needs the {key} data of step 'prepare_corpus', which did not run")


def stage_eval_set(ctx: ToolContext, stage) -> tuple[str, Path, str]:
    """(eval-set name, file, DatasetVersion node) a stage's battery measures on: the
    held-out split of its own data, else the task's held-out problems."""
    key = _prefix(stage) + "eval"
    prepared = ctx.output("prepare_corpus")
    return key, prepared.artifact(key), prepared.node(key)


def eval_sets(ctx: ToolContext) -> dict[str, str]:
    """Every held-out set of the run (the task's and each stage's own): what training data
    is decontaminated against, whichever stage trains on it."""
    prepared = ctx.output("prepare_corpus")
    return {k: v for k, v in prepared.artifacts.items() if k in ("eval", "test") or k.endswith(".eval")}


def sealed_test_set(ctx: ToolContext) -> tuple[Path, str] | None:
    """(file, DatasetVersion node) of the sealed test part, or None where the held-out rows were too few."""
    prepared = ctx.output("prepare_corpus")
    return (prepared.artifact("test"), prepared.node("test")) if "test" in prepared.artifacts else None
