"""training_engineer's tools: tokenizer, training stages, alignment, adapter merging."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from trainteam.agents.tools.base import StepResult, ToolContext, sha256_file
from trainteam.graph import EdgeKind, NodeKind

TRAIN_STAGES = ("pretrain", "sft")
ALIGN_STAGES = ("dpo", "grpo")


def _records(path: str) -> list[dict]:
    from trainteam.curation.demo import read_jsonl

    return read_jsonl(Path(path))


def _training_data(ctx: ToolContext) -> dict[str, Any]:
    """The curated dataset when curation ran, else the prepared one."""
    return ctx.latest("prepare_corpus", "curate")


def train_tokenizer(ctx: ToolContext) -> StepResult:
    """Byte-level BPE on the training split, digits one per token; reused when the same
    dataset version and settings were seen before."""
    from trainteam.trainers import train_tokenizer as fit

    data = _training_data(ctx)
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
                          run_id=ctx.run_id, metrics=metrics,
                          adapter=(final_dir / "adapter_config.json").exists())


class _Stage:
    """Runs one method with checkpoints under ``checkpoints/<run>/<stage>-v<visit>`` and
    ``resume="auto"``, so a run resumed after a crash continues from its last checkpoint."""

    def __init__(self, ctx: ToolContext, tokenizer, tok_node: str | None, data_node: str):
        self.ctx, self.tokenizer, self.tok_node, self.data_node = ctx, tokenizer, tok_node, data_node
        self.metrics: dict[str, float] = {}
        # A restart continues the curves and events of the attempt that spiked.
        before = ctx.inputs.get("before") or {}
        self.curves: dict[str, list] = {k: list(v) for k, v in (before.get("losses") or {}).items()}
        self.events: list[dict] = list(before.get("events") or [])

    def run(self, stage: str, model, data, parent: str | None):
        from trainteam.trainers import RestartProposal
        from trainteam.trainers import train as run_training

        ctx = self.ctx
        cfg = ctx.task.train_config(stage)
        if ctx.visit > 1:  # the changed plan of a second attempt after a failed gate: train twice as long
            cfg = cfg.model_copy(update={"max_steps": cfg.max_steps * 2})
        out = ctx.ws.dir("checkpoints") / ctx.run_id / f"{stage}-v{ctx.visit}"
        cfg = cfg.model_copy(update={"output_dir": out, "resume": "auto"})
        proposal = ctx.inputs.get("apply_proposal")
        if proposal is not None and proposal.get("stage") == stage and proposal.get("from_start"):
            # No checkpoint preceded the spike: the stage starts over from its input weights,
            # in a fresh folder, with the learning rate scaled as the person approved.
            cfg = cfg.model_copy(update={"learning_rate": cfg.learning_rate * proposal["lr_scale"],
                                         "output_dir": out.with_name(out.name + "-restart"), "resume": "auto"})
            self.events.append({"stage": stage, "step": proposal["spike_step"], "kind": "restart"})
            proposal = None
        elif proposal is not None and proposal.get("stage") == stage:
            proposal = RestartProposal.model_validate(proposal["proposal"])
            self.events.append({"stage": stage, "step": proposal.spike_step, "kind": "restart"})
        else:
            proposal = None
        report = run_training(stage, cfg, model, data, tokenizer=self.tokenizer, progress=ctx.progress,
                              apply_proposal=proposal)
        new = [list(x) for x in report.losses]
        if new:  # points from before the rollback stay; the resumed run's points follow them
            self.curves[stage] = [p for p in self.curves.get(stage, []) if p[0] < new[0][0]] + new
        if report.stopped_reason == "spike":
            return None, report
        stage_metrics = {"final_loss": report.losses[-1][1] if report.losses else float("nan"),
                         "steps": float(report.steps_done),
                         **{k: float(v) for k, v in report.telemetry.items() if isinstance(v, (int, float))}}
        self.metrics.update({f"{stage}.{k}": v for k, v in stage_metrics.items()})
        node = _checkpoint_node(ctx, Path(report.final_dir), stage, self.data_node, self.tok_node, parent,
                                stage_metrics)
        return node, report

    def spike_result(self, stage: str, report) -> StepResult:
        p = report.proposal
        if p is None:  # the spike came before the first checkpoint: nothing to roll back to
            step = report.steps_done
            proposal = {"stage": stage, "from_start": True, "spike_step": step, "lr_scale": 0.5,
                        "reason": f"loss spike at step {step}, before any checkpoint: restart {stage} from its "
                                  f"start with the learning rate scaled by 0.5"}
            why = proposal["reason"]
        else:
            proposal = {"stage": stage, "proposal": p.model_dump(mode="json")}
            step, why = p.spike_step, p.reason
        self.events.append({"stage": stage, "step": step, "kind": "spike"})
        return StepResult(outcome="spike", summary=f"{stage}: {why}", metrics=self.metrics,
                          details={"stage": stage, "proposal": proposal, "losses": self.curves,
                                   "events": self.events})


def _tokenizer_source(ctx: ToolContext) -> tuple[Path, str | None]:
    tok_out = ctx.outputs.get("train_tokenizer") or {}
    if tok_out.get("outcome") not in (None, "skipped"):
        return Path(tok_out["artifacts"]["tokenizer"]), tok_out["nodes"]["tokenizer"]
    if ctx.task.model.path is not None:
        return ctx.task.model.path, None
    raise LookupError("train: no tokenizer (add the pretrain stage, or give model.path)")


def train(ctx: ToolContext) -> StepResult:
    """The task's training stages in order: pretrain from random init, then SFT."""
    from trainteam.trainers import build_model, load_tokenizer

    task = ctx.task
    data = _training_data(ctx)
    stages = [s for s in TRAIN_STAGES if s in task.stages]
    tok_path, tok_node = _tokenizer_source(ctx)
    tokenizer = load_tokenizer(tok_path)
    runner = _Stage(ctx, tokenizer, tok_node, data["nodes"]["train"])
    model: Any = task.model.path
    parent = None
    final_dir = None
    for stage in stages:
        if model is None:
            model = build_model(task.model, tokenizer)
        parent, report = runner.run(stage, model, Path(data["artifacts"]["train"]), parent)
        if parent is None:
            return runner.spike_result(stage, report)
        final_dir = Path(report.final_dir)
        model = final_dir
    return StepResult(
        summary=f"trained {' → '.join(stages)}; final loss {runner.metrics.get(f'{stages[-1]}.final_loss', 0):.4f}",
        artifacts={"checkpoint": str(final_dir), "tokenizer": str(final_dir)},
        metrics=runner.metrics, nodes={"checkpoint": parent, **({"tokenizer": tok_node} if tok_node else {})},
        details={"stages": stages, "losses": runner.curves, "events": runner.events},
    )


def _preference_pairs(ctx: ToolContext, ckpt: Path, tokenizer, records: list[dict], limit: int = 512) -> list[dict]:
    """DPO pairs from the model's own answers: the reference is chosen; the model's wrong
    answer is rejected, or — where it was right — the answer with one digit changed."""
    from trainteam.curation import build_preference_pairs, score_reward
    from trainteam.trainers.eval_battery import greedy_generations
    from trainteam.trainers.models import load_model

    rows = [r for r in records if "prompt" in r and "completion" in r][:limit]
    model = load_model(ckpt)
    gens = greedy_generations(model, tokenizer, [r["prompt"] for r in rows], max_new_tokens=ctx.task.eval.max_new_tokens,
                              batch_size=ctx.task.eval.batch_size)
    samples = []
    for r, g in zip(rows, gens):
        answer = str(g.get("text", g.get("completion", ""))).strip()
        if answer == r["completion"]:
            digits = list(answer) or ["0"]
            i = len(digits) - 1
            digits[i] = str((int(digits[i]) + 1) % 10) if digits[i].isdigit() else "0"
            answer = "".join(digits)
        samples.append({"prompt": r["prompt"], "completion": r["completion"],
                        "reward": score_reward(r["completion"], r["completion"]).total})
        samples.append({"prompt": r["prompt"], "completion": answer,
                        "reward": score_reward(answer, r["completion"]).total})
    return build_preference_pairs(samples)


def align(ctx: ToolContext) -> StepResult:
    """DPO or GRPO (verifiable reward: exact answer, format) from the promoted checkpoint."""
    from trainteam.trainers import load_tokenizer

    task = ctx.task
    method = next(s for s in ALIGN_STAGES if s in task.stages)
    start = ctx.output(ctx.inputs.get("from", "gate"))
    data = _training_data(ctx)
    ckpt = Path(start["artifacts"]["checkpoint"])
    tokenizer = load_tokenizer(Path(start["artifacts"]["tokenizer"]))
    tok_node = (ctx.outputs.get("train_tokenizer") or {}).get("nodes", {}).get("tokenizer")
    runner = _Stage(ctx, tokenizer, tok_node, data["nodes"]["train"])
    records = _records(data["artifacts"]["train"])
    train_data = _preference_pairs(ctx, ckpt, tokenizer, records) if method == "dpo" else records
    node, report = runner.run(method, ckpt, train_data, start["nodes"]["checkpoint"])
    if node is None:
        return runner.spike_result(method, report)
    final_dir = Path(report.final_dir)
    return StepResult(
        summary=f"{method}: {report.steps_done} steps; final loss {runner.metrics.get(f'{method}.final_loss', 0):.4f}",
        artifacts={"checkpoint": str(final_dir), "tokenizer": str(final_dir)}, metrics=runner.metrics,
        nodes={"checkpoint": node}, details={"stages": [method], "losses": runner.curves, "events": runner.events},
    )


def merge_adapters(ctx: ToolContext) -> StepResult:
    """Fold LoRA adapters into full weights: one adapter is merged into its base; several
    adapters of one base are combined with TIES (PEFT) first."""
    from trainteam.trainers import merge_adapters as ties_merge

    last = ctx.latest("gate", "gate_align")
    ckpt = Path(last["artifacts"]["checkpoint"])
    adapters = [Path(o["artifacts"]["checkpoint"]) for name, o in ctx.outputs.items()
                if o.get("outcome") == "ok" and "checkpoint" in o.get("artifacts", {})
                and (Path(o["artifacts"]["checkpoint"]) / "adapter_config.json").exists()]
    adapters = list(dict.fromkeys(adapters))
    if not (ckpt / "adapter_config.json").exists():
        return StepResult(outcome="ok", summary="no adapters to merge: the checkpoint holds full weights",
                          artifacts=dict(last["artifacts"]), nodes={"checkpoint": last["nodes"]["checkpoint"]})
    out = ctx.ws.dir("checkpoints") / ctx.run_id / f"merged-v{ctx.visit}"
    tokenizer_dir = Path(last["artifacts"]["tokenizer"])
    from trainteam.trainers import load_tokenizer

    tokenizer = load_tokenizer(tokenizer_dir)
    if len(adapters) >= 2:
        merged = ties_merge(adapters, out, tokenizer=tokenizer, combination_type="ties")
        how = f"TIES merge of {len(adapters)} adapters"
    else:
        merged = _merge_one(ckpt, out, tokenizer)
        how = "adapter merged into its base"
    node = _checkpoint_node(ctx, Path(merged), "merged", _training_data(ctx)["nodes"]["train"], None,
                            last["nodes"]["checkpoint"], {})
    return StepResult(summary=how, artifacts={"checkpoint": str(merged), "tokenizer": str(merged)},
                      nodes={"checkpoint": node})


def _merge_one(adapter: Path, out: Path, tokenizer) -> Path:
    from peft import AutoPeftModelForCausalLM

    model = AutoPeftModelForCausalLM.from_pretrained(str(adapter), local_files_only=True)
    model.merge_and_unload().save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return out
