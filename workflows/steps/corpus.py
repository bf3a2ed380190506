"""data_curator's tools: bring the corpus in as versioned datasets.

A curriculum stage may name its own data (a different demo mix, other files): it is
prepared here beside the task's data, as its own dataset versions, so that curation
checks every training set against every eval set and the training step only reads
what the data steps recorded. The helpers at the end say where a stage's data is.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from trainteam.agents.toolbox import StepResult, ToolContext
from trainteam.core.hashing import sha256_file
from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic, read_jsonl, write_jsonl
from trainteam.graph.record import record_corpus, record_split
from trainteam.workflows.curriculum import curriculum_from_task


def _prepare(ctx: ToolContext, data) -> tuple[str, Path, Path, Path]:
    """One DataSpec as files in the workspace: (corpus node, folder, train path, eval path)."""
    g = ctx.graph
    if data.demo:
        cfg = ArithmeticConfig(task=data.demo, max_operand=data.max_operand, n_train=data.n_train,
                               n_eval=data.n_eval, seed=data.seed, fixed_width=data.fixed_width)
        params = {**cfg.model_dump(), "inject_leaks": data.inject_leaks}
        key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
        corpus = record_corpus(g, f"demo-{key}", source="demo", generator="arithmetic", params=params)
        folder = ctx.ws.dir("datasets") / f"demo-{key}"
        train_path, eval_path = folder / "train.jsonl", folder / "eval.jsonl"
        if not (train_path.exists() and eval_path.exists()):
            train, held_out = generate_arithmetic(cfg)
            # Injected leaks (demo only): eval problems planted in the training split, marked
            # so the curation report can say how many it caught.
            train += [{**ex, "id": f"leak-{ex['id']}", "leak_of": ex["id"]} for ex in held_out[: data.inject_leaks]]
            tmp = folder.with_name(folder.name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
            write_jsonl(train, tmp / "train.jsonl")
            write_jsonl(held_out, tmp / "eval.jsonl")
            shutil.rmtree(folder, ignore_errors=True)
            tmp.rename(folder)  # a crash mid-write leaves no half dataset behind
    else:
        src_train, src_eval = data.path, data.eval_path
        read_jsonl(src_train)  # validates: errors name file:line
        read_jsonl(src_eval)
        key = (sha256_file(src_train)[:8] + sha256_file(src_eval)[:8])
        corpus = record_corpus(g, f"files-{key}", source="files", path=str(src_train), eval_path=str(src_eval))
        folder = ctx.ws.dir("datasets") / f"files-{key}"
        folder.mkdir(parents=True, exist_ok=True)
        train_path, eval_path = folder / "train.jsonl", folder / "eval.jsonl"
        shutil.copyfile(src_train, train_path)
        shutil.copyfile(src_eval, eval_path)
    return corpus, folder, train_path, eval_path


def _versions(ctx: ToolContext, corpus: str, paths: dict[str, Path], stage: str | None) -> tuple[dict, dict]:
    nodes, counts = {}, {}
    for split, path in paths.items():
        digest = sha256_file(path)
        counts[split] = sum(1 for _ in open(path))
        nodes[split] = record_split(ctx.graph, digest[:16], corpus=corpus, split=split, path=str(path),
                                    sha256=digest, records=counts[split], stage=stage or None)
    return nodes, counts


def prepare_corpus(ctx: ToolContext) -> StepResult:
    """Generate the bundled verifiable demo data, or take the task's local files, as
    content-addressed dataset versions (the same inputs never do the work twice); the
    same for each curriculum stage that names its own data (keys ``<stage>.train`` ...)."""
    corpus, folder, train_path, eval_path = _prepare(ctx, ctx.task.data)
    nodes, counts = _versions(ctx, corpus, {"train": train_path, "eval": eval_path}, None)
    artifacts = {"train": str(train_path), "eval": str(eval_path)}
    metrics = {"n_train": counts["train"], "n_eval": counts["eval"]}
    nodes = {"corpus": corpus, **nodes}
    summary = f"{counts['train']} training and {counts['eval']} held-out problems ({folder.name})"
    own = [s for s in curriculum_from_task(ctx.task).stages if s.data is not None]
    for s in own:
        s_corpus, s_folder, s_train, s_eval = _prepare(ctx, s.data)
        s_nodes, s_counts = _versions(ctx, s_corpus, {"train": s_train, "eval": s_eval}, s.name)
        for split in ("train", "eval"):
            artifacts[f"{s.name}.{split}"] = str(s_train if split == "train" else s_eval)
            nodes[f"{s.name}.{split}"] = s_nodes[split]
            metrics[f"{s.name}.n_{split}"] = s_counts[split]
        nodes[f"{s.name}.corpus"] = s_corpus
        summary += f"; {s.name}: {s_counts['train']} / {s_counts['eval']} ({s_folder.name})"
    return StepResult(summary=summary, artifacts=artifacts, metrics=metrics, nodes=nodes,
                      details={"stage_data": [s.name for s in own]})


# -- where a stage's data is -------------------------------------------------------------------

def _prefix(stage) -> str:
    return f"{stage.name}." if stage is not None and stage.data is not None else ""


def stage_train_data(ctx: ToolContext, stage) -> tuple[Path, str]:
    """(train file, DatasetVersion node) a stage trains on: its own data when it has some,
    else the task's; the curated version when curation ran, else the prepared one."""
    key = _prefix(stage) + "train"
    for step in ("curate", "prepare_corpus"):
        out = ctx.outputs.get(step)
        if out is not None and out.get("outcome") not in ("skipped", None) and key in out.get("artifacts", {}):
            return Path(out["artifacts"][key]), out["nodes"][key]
    raise LookupError(f"step {ctx.step!r} needs the {key} data of step 'prepare_corpus', which did not run")


def stage_eval_set(ctx: ToolContext, stage) -> tuple[str, Path, str]:
    """(eval-set name, file, DatasetVersion node) a stage's battery measures on: the
    held-out split of its own data, else the task's held-out problems."""
    key = _prefix(stage) + "eval"
    prepared = ctx.output("prepare_corpus")
    return key, Path(prepared["artifacts"][key]), prepared["nodes"][key]


def eval_sets(ctx: ToolContext) -> dict[str, str]:
    """Every held-out set of the run (the task's and each stage's own): what training data
    is decontaminated against, whichever stage trains on it."""
    prepared = ctx.output("prepare_corpus")
    return {k: v for k, v in prepared["artifacts"].items() if k == "eval" or k.endswith(".eval")}
