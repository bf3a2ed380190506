"""data_curator's tools: bring the corpus in as versioned datasets."""

from __future__ import annotations

import hashlib
import json
import shutil

from trainteam.agents.tools.base import StepResult, ToolContext, sha256_file
from trainteam.graph import EdgeKind, NodeKind


def prepare_corpus(ctx: ToolContext) -> StepResult:
    """Generate the bundled verifiable demo data, or take the task's local files, as
    content-addressed dataset versions (the same inputs never do the work twice)."""
    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic, read_jsonl, write_jsonl

    data = ctx.task.data
    g = ctx.graph
    if data.demo:
        cfg = ArithmeticConfig(task=data.demo, max_operand=data.max_operand, n_train=data.n_train,
                               n_eval=data.n_eval, seed=data.seed)
        params = {**cfg.model_dump(), "inject_leaks": data.inject_leaks}
        key = hashlib.sha256(json.dumps(params, sort_keys=True).encode()).hexdigest()[:16]
        corpus = g.add_node(NodeKind.CORPUS, f"demo-{key}", source="demo", generator="arithmetic", params=params)
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
        corpus = g.add_node(NodeKind.CORPUS, f"files-{key}", source="files", path=str(src_train),
                            eval_path=str(src_eval))
        folder = ctx.ws.dir("datasets") / f"files-{key}"
        folder.mkdir(parents=True, exist_ok=True)
        train_path, eval_path = folder / "train.jsonl", folder / "eval.jsonl"
        shutil.copyfile(src_train, train_path)
        shutil.copyfile(src_eval, eval_path)

    nodes = {}
    counts = {}
    for split, path in (("train", train_path), ("eval", eval_path)):
        digest = sha256_file(path)
        n = sum(1 for _ in open(path))
        counts[split] = n
        nodes[split] = g.link(NodeKind.DATASET_VERSION, digest[:16], [(EdgeKind.DERIVED_FROM, corpus)],
                              split=split, path=str(path), sha256=digest, records=n)
    return StepResult(
        summary=f"{counts['train']} training and {counts['eval']} held-out problems ({folder.name})",
        artifacts={"train": str(train_path), "eval": str(eval_path)},
        metrics={"n_train": counts["train"], "n_eval": counts["eval"]},
        nodes={"corpus": corpus, **nodes},
    )
