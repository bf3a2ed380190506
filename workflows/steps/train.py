"""training_engineer's tools: tokenizer, training stages, alignment, adapter merging.

The ``train`` step walks the task's training stages in order — a plain task's
pretrain → SFT, or a curriculum's pretrain → mid_train → long_context → SFT — each
continuing from the previous stage's checkpoint, on the stage's own data, with its own
settings (a long-context stage's longer ``seq_len``). After every stage but the last
it runs that stage's eval battery and its gate rules:

- the last stage is measured and judged by the workflow's own ``evaluate`` and ``gate``
  steps, as before (a failed gate there can loop back or be accepted by a person);
- an earlier stage's failed gate (recorded as a Gate node) stops the step before the next
  stage trains. With ``on_gate_failure: stop`` the step ends with outcome ``error`` and
  the gate's reasons; with ``ask`` it ends ``stage_gate_failed`` and the engine asks a
  person. An approved acceptance comes back as ``decided.accepted_stage_gates`` (stage →
  the decided approval): the step runs again, reuses the stages already trained, records
  the gate as accepted by that person, and goes on to the next stage.
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from pathlib import Path
from typing import Any

from trainteam.contract.stage_config import StageAttempt, recorded, resolve_stage
from trainteam.contract.step_io import (
    Carried,
    Decision,
    KeepProposal,
    NeedsPerson,
    RestartPlan,
    Resume,
    StepResult,
    ToolContext,
    budget_overrun,
)
from trainteam.contract.step_outputs import TrainOutput
from trainteam.core.hashing import weights_hash
from trainteam.curation import build_preference_pairs, score_reward
from trainteam.curation.demo import read_jsonl
from trainteam.curation.formats import example, folder_prompt_format, query, row_kind
from trainteam.curation.rewards import default_rewards
from trainteam.graph import NodeKind, node_id
from trainteam.graph.record import record_checkpoint, record_tokenizer
from trainteam.trainers.evaluation.battery import greedy_generations
from trainteam.trainers.evaluation.stage_gate import StageInput, judge_stage, random_init
from trainteam.trainers.fit.loop import train as run_training
from trainteam.trainers.launch.supervisor import train_launched
from trainteam.trainers.methods.method_registry import get_method
from trainteam.trainers.training import budget
from trainteam.trainers.training.chat_templates import chosen_format, save_tokenizer_with_template
from trainteam.trainers.training.checkpoints import checkpoint_step, complete_checkpoints, list_checkpoints
from trainteam.trainers.training.models import build_model, load_model
from trainteam.trainers.training.tokenizer import load_tokenizer
from trainteam.trainers.training.tokenizer import train_tokenizer as fit
from trainteam.workflows.report.evidence import with_spike_curve
from trainteam.workflows.steps.corpus import stage_eval_set, stage_train_data
from trainteam.workflows.steps.eval_length import eval_budget
from trainteam.workflows.steps.headroom import skip_align
from trainteam.workflows.steps.judge import measure_stage, settle_gate, stage_style
from trainteam.workflows.steps.recipe import StageRecipe, find_recipe
from trainteam.workflows.steps.retry import StopRetry, retraining_plan, retry_note
from trainteam.workflows.task.curriculum import curriculum_from_task


def _records(path: str) -> list[dict]:
    return read_jsonl(Path(path))


def _training_data(ctx: ToolContext) -> StepResult:
    """The curated dataset when curation ran, else the prepared one."""
    return ctx.latest("prepare_corpus", "curate")


def train_tokenizer(ctx: ToolContext) -> StepResult:
    """Byte-level BPE on the training split (and every curriculum stage's own data), digits
    one per token; reused when the same dataset versions and settings were seen before.
    A task that continues a local model (``model.path``) keeps that model's tokenizer."""
    if ctx.task.model.path is not None:
        return StepResult(outcome="skipped", summary=f"the tokenizer of {ctx.task.model.path} is kept")
    data = _training_data(ctx)
    own = [stage_train_data(ctx, s) for s in curriculum_from_task(ctx.task).stages if s.data is not None]
    sources = [(data.artifact("train"), data.node("train"))] + list(dict.fromkeys(own))
    cfg = ctx.task.tokenizer
    key = hashlib.sha256(("".join(n for _, n in sources) + cfg.model_dump_json()).encode()).hexdigest()[:16]
    out_dir = ctx.ws.dir("tokenizers") / key
    if not (out_dir / "tokenizer.json").exists():
        texts = (r.get("text") or (r["prompt"] + r["completion"]) for path, _ in sources for r in _records(str(path)))
        fit(texts, cfg, out_dir)
    node = record_tokenizer(
        ctx.graph,
        key,
        sources=[n for _, n in sources],
        step_node=ctx.step_node,
        path=str(out_dir),
        vocab_size=cfg.vocab_size,
        split_digits=cfg.split_digits,
    )
    return StepResult(
        summary=f"tokenizer {key} (vocab {cfg.vocab_size})",
        artifacts={"tokenizer": str(out_dir)},
        nodes={"tokenizer": node},
    )


def _templated_tokenizer(ctx: ToolContext, model_path: Path, template: str) -> tuple[Path, str]:
    """The model's tokenizer with the task's ``model.chat_template`` (trainers/training/chat_templates.py), saved
    in the workspace and recorded; every checkpoint then saves it."""
    key = hashlib.sha256(f"{Path(model_path).resolve()}\0{template}".encode()).hexdigest()[:16]
    out_dir, _ = save_tokenizer_with_template(Path(model_path), template, ctx.ws.dir("tokenizers") / key)
    node = record_tokenizer(
        ctx.graph,
        key,
        sources=[],
        step_node=ctx.step_node,
        path=str(out_dir),
        vocab_size=len(load_tokenizer(out_dir)),
        split_digits=False,
    )
    return out_dir, node


def _checkpoint_node(
    ctx: ToolContext,
    final_dir: Path,
    stage: str,
    data_node: str,
    tok_node: str | None,
    parent: str | None,
    metrics: dict,
    config=None,
) -> str:
    """The stage's final weights in the graph, with the resolved config (``config``) they were trained with."""
    return record_checkpoint(
        ctx.graph,
        weights_hash(final_dir)[:16],
        run_id=ctx.run_id,
        step_node=ctx.step_node,
        trained_on=data_node,
        tokenizer=tok_node,
        derived_from=parent,
        path=str(final_dir),
        stage=stage,
        metrics=metrics,
        adapter=(final_dir / "adapter_config.json").exists(),
        method=config.method if config else None,
        seq_len=config.max_length if config else None,
        prompt_format=folder_prompt_format(final_dir),
        config=recorded(config) if config else None,
    )


class _Stage:
    """Runs one stage with checkpoints under ``checkpoints/<run>/<stage>-v<visit>`` and
    ``resume="auto"``, so a run resumed after a crash continues from its last checkpoint.

    A spike ends the attempt with a restart proposal for a person (``spike``), unless a restart
    is not worth proposing (``spike.restart_refusal``: the stage's ``max_restarts`` are used
    up, or the last restart reproduced the same spike): then the step fails, or with
    ``on_gate_failure: ask`` a person may keep the weights from before the spike
    (``spike_limit``). A restart from the stage's start trains in a folder of its own
    (``-restart<k>``) at a learning rate halved once more per restart, so no two attempts
    replay each other. At the budget's ceiling the trainer saves and stops (``over_budget``);
    a person's extension resumes from that checkpoint."""

    def __init__(self, ctx: ToolContext, tokenizer, tok_node: str | None):
        self.ctx, self.tokenizer, self.tok_node = ctx, tokenizer, tok_node
        self.metrics: dict[str, float] = {}
        # A restart continues the curves, events and spike history of the attempts before it.
        before = ctx.decided.before
        self.curves: dict[str, list] = {k: list(v) for k, v in before.losses.items()}
        self.events: list[dict] = list(before.events)
        self.spikes: list[dict] = list(before.spikes)
        self.attempt: dict[str, Any] = {}  # this attempt's folder and LR factor (what a spike proposal builds on)
        self.configs: dict[str, dict] = {}  # stage -> the resolved config it trained with: the judge, runs show

    def _out(self, stage: str) -> Path:
        return self.ctx.ws.dir("checkpoints") / self.ctx.run_id / f"{stage}-v{self.ctx.visit}"

    def finished(self, stage: str, data_node: str, parent: str | None) -> tuple[str, Path] | None:
        """A stage this visit already trained to the end (its ``final`` weights are on disk, the
        newest restart's first): a restart after a later stage's spike continues from it instead
        of training it again. Its metrics come back from its Checkpoint node."""
        for final in _finals(self.ctx, stage):
            if _is_final(final):
                node = _checkpoint_node(self.ctx, final, stage, data_node, self.tok_node, parent, {})
                metrics = self.ctx.graph.get_node(node).get("metrics") or {}
                self.metrics.update({f"{stage}.{k}": float(v) for k, v in metrics.items()})
                return node, final
        return None

    def _config(self, stage: str, model, recipe: StageRecipe | None = None, completion_length: int | None = None):
        """The stage's TrainConfig for this attempt (``resolve_stage``: the task's, the recipe's, a retry's and
        this attempt's settings, in TRL's names), and the rollback proposal it applies. A first attempt with a
        ``warm_start`` (the recipe search's chosen probe) begins from it: its checkpoint moves into the stage's
        folder, and ``resume="auto"`` continues it."""
        ctx = self.ctx
        # a retry after a failed gate follows the judge's diagnosis (more steps, another rate; StopRetry: none helps)
        retry = retraining_plan(ctx, stage)
        out, factor, proposal = self._out(stage), 1.0, None
        restart = ctx.decided.restart
        if restart is not None and restart.stage == stage:
            out = Path(restart.output_dir or out)
            factor = restart.lr_factor
            if not restart.from_start:
                proposal = restart.proposal
            event = {"stage": stage, "step": restart.spike_step, "kind": "restart"}
            if event not in self.events:  # the same restart resumed (more budget, a crash) is one restart
                self.events.append(event)
        chosen = recipe.report.chosen if recipe is not None and recipe.report is not None else None
        cfg = resolve_stage(
            ctx.task,
            stage,
            recipe=chosen,
            retry=retry,
            attempt=StageAttempt(out, factor),
            completion_length=completion_length,
        )
        warm_start = recipe.warm_start if recipe is not None else None
        if restart is None or restart.stage != stage:
            if warm_start is not None and _continues(warm_start, cfg) and not list_checkpoints(out):
                out.mkdir(parents=True, exist_ok=True)
                shutil.move(str(warm_start), str(out / warm_start.name))
                shutil.rmtree(warm_start.parent, ignore_errors=True)  # the rest of the probe's folder: nothing to keep
        self.attempt = {"output_dir": out, "lr_factor": factor, "input": model}
        self.configs[stage] = recorded(cfg)  # once per attempt: what the trainer gets
        return cfg, proposal

    def run(
        self,
        stage: str,
        model,
        data,
        parent: str | None,
        data_node: str,
        recipe: StageRecipe | None = None,
        completion_length: int | None = None,
    ):
        ctx = self.ctx
        cfg, proposal = self._config(stage, model, recipe, completion_length)
        callbacks = recipe.callbacks if recipe is not None else None
        if ctx.task.distributed is not None:  # the same training, in launched processes (trainers/launch/supervisor.py)
            report = train_launched(
                cfg.method,
                cfg,
                model,
                data,
                tokenizer=self.tokenizer,
                dist=ctx.task.distributed,
                apply_proposal=proposal,
                answer=ctx.task.answer,
            )
        else:
            report = run_training(
                cfg.method,
                cfg,
                model,
                data,
                tokenizer=self.tokenizer,
                progress=ctx.progress,
                apply_proposal=proposal,
                reward_funcs=default_rewards(self.tokenizer, ctx.task.answer),
                callbacks=callbacks,
            )
        new = [list(x) for x in report.losses]
        if new:  # points from before the rollback stay; the resumed run's points follow them
            self.curves[stage] = [p for p in self.curves.get(stage, []) if p[0] < new[0][0]] + new
        if report.stopped_reason in ("spike", "budget"):
            return None, report
        # Telemetry counts the steps of this attempt only (a resumed run: max_steps minus the
        # checkpoint's step); the stage's step count is the trainer's global step.
        tel = {
            ("steps_this_attempt" if k == "steps" else k): float(v)
            for k, v in report.telemetry.items()
            if isinstance(v, (int, float))
        }
        stage_metrics = {
            **tel,
            "final_loss": report.losses[-1][1] if report.losses else float("nan"),
            "steps": float(report.steps_done),
            "seq_len": float(cfg.max_length),
        }
        self.metrics.update({f"{stage}.{k}": v for k, v in stage_metrics.items()})
        node = _checkpoint_node(
            ctx, Path(report.final_dir), stage, data_node, self.tok_node, parent, stage_metrics, config=cfg
        )
        return node, report

    def stopped(self, stage: str, report) -> StepResult:
        """The result of an attempt that did not finish: a spike, or the budget's ceiling."""
        if report.stopped_reason == "budget":
            limit = budget.current()
            overrun = round(-limit.left_s(), 2) if limit is not None else None
            where = {
                "where": f"training {stage}",
                "checkpoint": str(report.final_dir),
                "step": report.steps_done,
                "overrun_s": overrun,
            }
            return StepResult(
                outcome="over_budget",
                metrics=self.metrics,
                summary=f"{stage}: budget reached at step {report.steps_done}; checkpoint kept",
                details={"stage": stage, **where, **self.carried().model_dump(), "configs": self.configs},
                needs=over_budget(self.ctx, where, self.carried()),
            )
        return self.spike_result(stage, report)

    def spike_result(self, stage: str, report) -> StepResult:
        from trainteam.trainers.training.spike import restart_refusal

        ev = report.spike_evidence or {}
        step = report.steps_done if report.proposal is None else report.proposal.spike_step
        previous = [s for s in self.spikes if s["stage"] == stage]
        refusal = restart_refusal({**ev, "step": step}, previous, self.ctx.task.train_config(stage).spike.max_restarts)
        self.events.append({"stage": stage, "step": step, "kind": "spike"})
        self.spikes.append(
            {
                "stage": stage,
                "step": step,
                "metric": ev.get("metric"),
                "value": ev.get("value"),
                "rule": ev.get("rule"),
                "z": ev.get("z"),
            }
        )
        details = {
            "stage": stage,
            "losses": self.curves,
            "events": self.events,
            "spikes": self.spikes,
            "evidence": ev,
            "configs": self.configs,
        }
        if refusal is not None:
            return self._unresolved(stage, step, refusal, details)
        proposal = self._proposal(stage, step, report, ev, previous)
        # The person deciding sees what the monitor saw, whichever kind of proposal it is.
        needs = NeedsPerson(
            action="restart_after_spike",
            numbered=True,
            proposed=proposal,
            evidence=with_spike_curve({"monitor": ev, "spikes": self.spikes}, proposal, self.curves),
            requested_by=self.ctx.persona,
            resume=Resume(kind="restart", stage=stage, restart=RestartPlan.model_validate(proposal)),
            refused="restart",
            carried=self.carried(),
        )
        return StepResult(
            outcome="spike",
            summary=f"{stage}: {proposal['reason']}",
            metrics=self.metrics,
            details={**details, "proposal": proposal},
            needs=needs,
        )

    def carried(self) -> Carried:
        """What a re-run of this step continues from this attempt."""
        return Carried(losses=self.curves, events=self.events, spikes=self.spikes)

    def _proposal(self, stage: str, step: int, report, ev: dict, previous: list[dict]) -> dict[str, Any]:
        p = report.proposal
        self.spikes[-1]["from_start"] = p is None
        if p is not None:  # roll back inside the folder that spiked, at that attempt's learning rate
            return {
                "stage": stage,
                "from_start": False,
                "spike_step": step,
                "reason": p.reason,
                "output_dir": str(self.attempt["output_dir"]),
                "lr_factor": self.attempt["lr_factor"],
                "proposal": p.model_dump(mode="json"),
            }
        # No checkpoint preceded the spike: start the stage over from its input weights, in a
        # folder of its own, at half the learning rate of the attempt that spiked.
        k = 1 + sum(1 for s in previous if s.get("from_start"))
        factor = self.attempt["lr_factor"] * 0.5
        seen = (
            f" ({ev['metric']} {ev['value']:.4g} against a window mean of {ev['window_mean']:.4g} ± "
            f"{ev['window_std']:.2g}, z {ev['z']:.1f})"
            if "z" in ev
            else f" ({ev.get('metric')} {ev.get('value')})"
        )
        out = self._out(stage)
        return {
            "stage": stage,
            "from_start": True,
            "spike_step": step,
            "lr_factor": factor,
            "output_dir": str(out.with_name(f"{out.name}-restart{k}")),
            "reason": f"spike at step {step}{seen}, before any checkpoint: restart {stage} from its start "
            f"with the learning rate at {factor:g}× the task's",
        }

    def _unresolved(self, stage: str, step: int, refusal: str, details: dict) -> StepResult:
        """No restart is proposed: the step fails, or a person may keep the weights before the spike."""
        folder = Path(self.attempt["output_dir"])
        before = [c for c in complete_checkpoints(folder) if (checkpoint_step(c) or 0) <= step - 2]
        source = self.attempt.get("input")
        keep = before[-1] if before else (Path(source) if isinstance(source, (str, Path)) else None)
        summary = f"{stage}: spike at step {step}; no restart proposed: {refusal}"
        if self.ctx.task.on_gate_failure != "ask" or keep is None:
            return StepResult(outcome="error", summary=summary, metrics=self.metrics, details=details)
        what = f"checkpoint {keep.name} (before the spike)" if before else f"the stage's input weights ({keep})"
        accept = {"stage": stage, "keep": str(keep), "spike_step": step, "reason": f"keep {what} as {stage}'s result"}
        needs = NeedsPerson(
            action=f"accept_spiked_{stage}",
            proposed=accept,
            requested_by=self.ctx.persona,
            evidence=with_spike_curve({"monitor": details["evidence"], "spikes": self.spikes}, accept, self.curves),
            refused="acceptance",
            resume=Resume(kind="keep_spiked", stage=stage, keep=KeepProposal.model_validate(accept)),
            carried=self.carried(),
        )
        return StepResult(
            outcome="spike_limit",
            summary=f"{summary}; a person may keep {what}",
            metrics=self.metrics,
            details={**details, "accept": accept},
            needs=needs,
        )


def _finals(ctx: ToolContext, stage: str) -> list[Path]:
    """Where ``stage``'s finished weights of this step visit may be, first match wins: what a
    person kept after an unresolved spike, the newest restart's ``final``, the stage's ``final``."""
    out = ctx.ws.dir("checkpoints") / ctx.run_id / f"{stage}-v{ctx.visit}"
    kept = ctx.decided.kept_after_spike.get(stage)
    restarts = sorted(out.parent.glob(f"{out.name}-restart*"), key=lambda p: p.name, reverse=True)
    return ([Path(kept.keep)] if kept else []) + [r / "final" for r in restarts] + [out / "final"]


def _is_final(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("*.safetensors")) and (folder / "tokenizer.json").is_file()


def stage_progress(ctx: ToolContext, stage: str) -> tuple[bool, int]:
    """(finished, steps of its newest complete checkpoint) of ``stage`` in this step visit's
    folders: what a plan still has to train. Reads the disk only (no torch)."""
    if any(_is_final(f) for f in _finals(ctx, stage)):
        return True, 0
    out = ctx.ws.dir("checkpoints") / ctx.run_id / f"{stage}-v{ctx.visit}"
    folders = [out, *out.parent.glob(f"{out.name}-restart*")]
    restart = ctx.decided.restart
    if restart is not None and restart.stage == stage and restart.output_dir:
        folders = [Path(restart.output_dir)]  # a restart trains in its own folder (from its start)
    steps = [checkpoint_step(c) or 0 for f in folders for c in complete_checkpoints(f)]
    return False, max(steps, default=0)


def _tokenizer_source(ctx: ToolContext) -> tuple[Path, str | None]:
    tok_out = ctx.ran("train_tokenizer")
    if tok_out is not None:
        return tok_out.tokenizer, tok_out.node("tokenizer")
    if ctx.task.model.path is not None and ctx.task.model.chat_template:
        return _templated_tokenizer(ctx, ctx.task.model.path, ctx.task.model.chat_template)
    if ctx.task.model.path is not None:
        return ctx.task.model.path, None
    raise LookupError("train: no tokenizer (add the pretrain stage, or give model.path)")


def train(ctx: ToolContext) -> StepResult:
    """The task's training stages in order (see the module docstring): pretrain from random
    init, then each stage from the previous stage's weights on its own data; the earlier
    stages' batteries and gates on the way."""
    task = ctx.task
    cur = curriculum_from_task(task)
    stages = cur.training_stages()
    names = [s.name for s in stages]
    tok_path, tok_node = _tokenizer_source(ctx)
    tokenizer = load_tokenizer(tok_path)
    chosen = chosen_format(Path(tok_path), tokenizer) if task.model.path is not None else None
    runner = _Stage(ctx, tokenizer, tok_node)
    accepted = ctx.decided.accepted_stage_gates
    model: Any = task.model.path
    parent, final_dir = None, None
    seen: list[str] = []
    record: dict[str, dict] = {"stage_evals": {}, "stage_gates": {}, "checkpoints": {}, "data": {}, "search": {}}
    align = cur.align_stage()
    record["inputs"] = {}
    record["chat_template"] = {"chosen": chosen.describe()} if chosen else {}  # the model carries none
    for st in stages + ([align] if align else []):  # a set length shorter than a held-out answer: refused now
        record.setdefault("generation", {})[st.name] = eval_budget(ctx, st, tokenizer).tokens
    for i, st in enumerate(stages):
        data_path, data_node = stage_train_data(ctx, st)
        seen.append(str(data_path))
        # what the stage starts from, on its own held-out set: what its gate compares against
        record["inputs"][st.name] = _input_of(
            ctx, cur, st, model, tok_path if i == 0 else model, tokenizer, record, seen
        ).model_dump()
        record.setdefault("base", record["inputs"][st.name])
        # A stage this visit trained to its end already (before a crash, a later stage's spike, a
        # failed stage gate a person accepted, or more budget granted) is not trained again.
        reused = runner.finished(st.name, data_node, parent)
        if reused is not None:
            parent, final_dir = reused
        else:
            later = names[i + 1 :] + ([align.name] if align else [])
            recipe = _recipe(runner.ctx, st.name, model, tokenizer, data_path, later)
            if model is None:
                model = build_model(task.model, tokenizer)
            try:
                parent, report = runner.run(st.name, model, recipe.rows or data_path, parent, data_node, recipe)
            except StopRetry as stop:  # the judge's plan: retraining cannot fix what failed
                return StepResult(
                    outcome="error",
                    summary=str(stop),
                    metrics=runner.metrics,
                    details={"stages": names[: i + 1], "retry": "stopped", **record},
                )
            if recipe.report is not None:
                record["search"][st.name] = recipe.report.model_dump(mode="json")
            if parent is None:
                return runner.stopped(st.name, report)
            final_dir = Path(report.final_dir)
        model = final_dir
        record["checkpoints"][st.name], record["data"][st.name] = parent, data_node
        if i < len(stages) - 1:  # the last stage: the workflow's evaluate and gate steps
            failed = _measure_and_gate(
                ctx, cur, st, final_dir, parent, seen, runner.metrics, record, accepted.get(st.name)
            )
            if failed is not None:
                return _stage_gate_failed(ctx, st.name, names, i, failed, runner, parent, record)
    return _trained(ctx, names, runner, record, final_dir, parent, tok_node, seen)


def _trained(
    ctx: ToolContext, names: list[str], runner, record: dict, final_dir, parent, tok_node, seen: list[str]
) -> StepResult:
    """The step's result once every stage trained: the last checkpoint, the curves, the stages' records."""
    last = names[-1]
    shown = "; ".join(
        f"{n} exact match {m['exact_match']:.3g}" for n, m in record["stage_evals"].items() if "exact_match" in m
    )
    note = retry_note(ctx, last)
    return StepResult(
        summary=f"trained {' → '.join(names)}; final loss {runner.metrics.get(f'{last}.final_loss', 0):.4f}"
        + (f" ({shown})" if shown else "")
        + (
            f"; the model carries no chat template: trained with {chosen}"
            if (chosen := record["chat_template"].get("chosen"))
            else ""
        )
        + (f"; {note}" if note else ""),
        artifacts={"checkpoint": str(final_dir), "tokenizer": str(final_dir)},
        metrics=runner.metrics,
        nodes={"checkpoint": parent, **({"tokenizer": tok_node} if tok_node else {})},
        details=TrainOutput(
            stages=names,
            losses=runner.curves,
            events=runner.events,
            spikes=runner.spikes,
            trained_on=seen,
            configs=runner.configs,
            **record,
        ).model_dump(mode="json", exclude_unset=True),
    )


def _recipe(ctx: ToolContext, stage: str, model, tokenizer, data_path: Path, later: list[str]) -> StageRecipe:
    """The stage's recipe: the searched settings (``task.search``) chosen, or none for a stage the task gave a
    recipe (the resolver applies it: ``resolve_stage``)."""
    make = (lambda: build_model(ctx.task.model, tokenizer)) if model is None else (lambda: model)
    return find_recipe(ctx, stage, make, data_path, tokenizer, later)


def _continues(warm_start: Path | None, cfg) -> bool:
    """A probe's checkpoint the stage may go on from: still there, and trained towards this very length."""
    if warm_start is None or not (warm_start / "trainer_state.json").is_file():
        return False
    return json.loads((warm_start / "trainer_state.json").read_text()).get("max_steps") == cfg.max_steps


def over_budget(ctx: ToolContext, where: dict[str, Any], carried: Carried | None = None) -> NeedsPerson:
    """The ask at the budget's ceiling, with what the step had reached (``where``)."""
    budget = ctx.task.budget
    allowed_s = ctx.allowed_s if ctx.allowed_s is not None else budget.allowed_s()
    return budget_overrun(ctx.step, budget, allowed_s, where, carried)


def _stage_gate_failed(
    ctx: ToolContext, stage: str, names: list[str], i: int, failed, runner: _Stage, parent: str, record: dict
) -> StepResult:
    """An earlier curriculum stage's gate failed: the step stops (``stop``) or asks a person (``ask``)."""
    ask = ctx.task.on_gate_failure == "ask"
    summary = f"{failed.summary} (after stage {stage}; {' → '.join(names[i + 1 :])} " + (
        "waits for a person)" if ask else "not trained)"
    )
    needs = (
        NeedsPerson(
            action=f"accept_failed_gate_{stage}",
            proposed={"gate": f"{ctx.step}.{stage}", "stage": stage},
            evidence={"reasons": failed.reasons},
            requested_by="eval_judge",
            refused="acceptance",
            resume=Resume(kind="accept_stage_gate", stage=stage),
            carried=Carried(losses=runner.curves, events=runner.events),
        )
        if ask
        else None
    )
    return StepResult(
        outcome="stage_gate_failed" if ask else "error",
        summary=summary,
        metrics=runner.metrics,
        nodes={"checkpoint": parent, "gate": record["stage_gates"][stage]["node"]},
        details={
            "stages": names[: i + 1],
            "stage": stage,
            "reasons": failed.reasons,
            "losses": runner.curves,
            "events": runner.events,
            **record,
        },
        needs=needs,
    )


def _measure_and_gate(
    ctx: ToolContext,
    cur,
    st,
    ckpt: Path,
    ckpt_node: str,
    seen: list[str],
    metrics: dict[str, float],
    record: dict,
    accepted: Decision | None = None,
):
    """A stage's battery (an Eval node per stage; read back when a restart passes by again)
    and its gate rules against the stage before it. Returns the failed GateDecision, or None
    when it passed or ``accepted`` (a person's approved decision) accepts its failure."""
    key = f"{ctx.run_id}/{ctx.step}#{ctx.visit}/{st.name}"
    if ctx.graph.has_node(node_id(NodeKind.EVAL, key)):
        ev_node = node_id(NodeKind.EVAL, key)
        measured = {k: float(v) for k, v in ctx.graph.get_node(ev_node)["metrics"].items()}
    else:
        ev_node, result = measure_stage(ctx, st, ckpt, ckpt, ckpt_node, key, [Path(p) for p in seen])
        measured = result.metrics
    record["stage_evals"][st.name] = measured
    metrics.update({f"{st.name}.{k}": v for k, v in measured.items()})
    before = StageInput.model_validate(record["inputs"][st.name])
    n_eval = ctx.graph.get_node(ev_node).get("n_eval")
    decision = judge_stage(
        st.name, st.kind, st.method, measured, list(st.gates), before, n_eval, style=stage_style(ctx, st)
    )
    decision, node = settle_gate(ctx, decision, accepted, ev_node)
    record["stage_gates"][st.name] = {
        "passed": decision.passed,
        "reasons": decision.reasons,
        "node": node,
        "accepted_by": decision.accepted_by,
    }
    return None if decision.promote else decision


def _input_of(ctx: ToolContext, cur, st, model, tok_dir, tokenizer, record: dict, seen: list[str]) -> StageInput:
    """What stage ``st`` starts from, on its own held-out set (a gate compares like with like): the stage
    before it as measured, when both hold out the same rows; else its input weights measured on ``st``'s set
    (an Eval node, read back on a re-run: measured once). The first stage's input is the task's model
    (``base``, measured once per run), or for a model built from its config a random init's known values."""
    prev = cur.previous(st.name)
    if (
        prev is not None
        and prev.name in record["stage_evals"]
        and stage_eval_set(ctx, prev)[0] == stage_eval_set(ctx, st)[0]
    ):
        return StageInput(name=prev.name, metrics=record["stage_evals"][prev.name])
    if model is None:
        return random_init(len(tokenizer))
    name, key = (
        ("base", f"{ctx.run_id}/base")
        if prev is None
        else (f"{prev.name} (on {st.name}'s held-out set)", f"{ctx.run_id}/{ctx.step}#{ctx.visit}/{st.name}/input")
    )
    if ctx.graph.has_node(node_id(NodeKind.EVAL, key)):
        metrics = ctx.graph.get_node(node_id(NodeKind.EVAL, key))["metrics"]
    else:
        _, result = measure_stage(ctx, st, Path(model), Path(tok_dir), None, key, [Path(p) for p in seen])
        metrics = result.metrics
    return StageInput(name=name, metrics={k: float(v) for k, v in metrics.items()})


def _preference_pairs(
    ctx: ToolContext, ckpt: Path, tokenizer, records: list[dict], max_new_tokens: int, limit: int = 512
) -> list[dict]:
    """DPO pairs from the model's own answers: the reference is chosen; the model's wrong
    answer is rejected, or — where it was right by the task's ``answer`` rule — a wrong one
    (``AnswerSpec.wrong_answer``: a number with one digit changed, another label, another row's answer)."""
    rows = [r for r in records if row_kind(r) in ("pair", "chat")][:limit]
    model = load_model(ckpt)
    gens = greedy_generations(
        model, tokenizer, [query(r) for r in rows], max_new_tokens=max_new_tokens, batch_size=ctx.task.eval.batch_size
    )
    spec, rng = ctx.task.answer, random.Random(ctx.task.data.seed)
    references = [example(r)[1] for r in rows]
    samples = []
    for i, (reference, g) in enumerate(zip(references, gens, strict=True)):  # one generation per row
        answer = str(g.get("text", g.get("completion", ""))).strip()
        if spec.is_correct(answer, reference):
            answer = spec.wrong_answer(reference, rng, references)
        for completion in (reference, answer):  # grouped by row: a chat prompt is a list of turns
            samples.append(
                {
                    "prompt": str(i),
                    "completion": completion,
                    "reward": score_reward(completion, reference, answer=spec).total,
                }
            )
    return [{**pair, "prompt": query(rows[int(pair["prompt"])])} for pair in build_preference_pairs(samples)]


def align(ctx: ToolContext) -> StepResult:
    """DPO or GRPO (verifiable reward: exact answer, format) from the promoted checkpoint,
    on the align stage's own data when the curriculum gives it some."""
    st = curriculum_from_task(ctx.task).align_stage()
    if st is None:
        raise LookupError("align: the task has no dpo or grpo stage")
    method = st.method
    start = ctx.output(ctx.inputs.from_ or "gate")
    skipped = skip_align(ctx, st.name, start)
    if skipped is not None:
        return skipped
    data_path, data_node = stage_train_data(ctx, st)
    ckpt = start.checkpoint
    tokenizer = load_tokenizer(start.tokenizer)
    tok_out = ctx.outputs.get("train_tokenizer")
    tok_node = tok_out.nodes.get("tokenizer") if tok_out is not None else None
    runner = _Stage(ctx, tokenizer, tok_node)
    done = runner.finished(st.name, data_node, start.checkpoint_node)  # after a crash, or a person kept it
    if done is not None:
        node, final_dir = done
        what = f"{st.name}: trained before ({final_dir.parent.name}/{final_dir.name})"
    else:
        records = _records(str(data_path))
        from_answers = method is not None and get_method(method).pairs_from_answers
        given = from_answers and records and all(row_kind(r) == "preference" for r in records)
        # DPO on the user's chosen/rejected rows as given; else pairs from the model's own answers
        answer_tokens = eval_budget(ctx, st, tokenizer).tokens  # the model's own answers, as long as the judge's
        train_data = (
            _preference_pairs(ctx, ckpt, tokenizer, records, answer_tokens) if from_answers and not given else records
        )
        # GRPO's completions as long as the answer checks' (``eval_budget``) unless the task sets their length
        node, report = runner.run(
            st.name, ckpt, train_data, start.checkpoint_node, data_node, completion_length=answer_tokens
        )
        if node is None:
            return runner.stopped(st.name, report)
        final_dir = Path(report.final_dir)
        what = f"{st.name}: {report.steps_done} steps; final loss {runner.metrics.get(f'{st.name}.final_loss', 0):.4f}"
    return StepResult(
        summary=what,
        artifacts={"checkpoint": str(final_dir), "tokenizer": str(final_dir)},
        metrics=runner.metrics,
        nodes={"checkpoint": node},
        details=TrainOutput(
            stages=[st.name],
            losses=runner.curves,
            events=runner.events,
            spikes=runner.spikes,
            configs=runner.configs,
            trained_on=[*_trained_on(ctx), str(data_path)],
        ).model_dump(mode="json", exclude_unset=True),
    )


def _trained_on(ctx: ToolContext) -> list[str]:
    """The files the train step's checkpoint trained on (none when it did not run)."""
    train = ctx.outputs.get("train")
    return TrainOutput.of(train).trained_on if train is not None else []


def merge_adapters(ctx: ToolContext) -> StepResult:
    """Fold the gated checkpoint's LoRA adapter into full weights, onto the base it was trained
    on. That base already holds every earlier stage (an align adapter is trained on base + SFT,
    merged), so the result is the very model the gates judged. Combining adapters of one base
    by TIES averaging (``trainteam.trainers.merge_adapters``) is for a person who asks for it:
    averaging an SFT adapter with an align adapter trained on top of it registered a worse
    model than either (real model, 50 held-out rows: 0.40 / 0.42 gated, 0.26 / 0.32 registered)."""
    last = ctx.latest("gate", "gate_align")
    ckpt = last.checkpoint
    # the stage whose weights these are (SFT's when the align stage was skipped): the final eval's battery
    gated = {"stages": [last.stage]} if last.stage else {}
    if not (ckpt / "adapter_config.json").exists():
        return StepResult(
            outcome="ok",
            summary="no adapters to merge: the checkpoint holds full weights",
            artifacts=dict(last.artifacts),
            nodes={"checkpoint": last.checkpoint_node},
            details=gated,
        )
    out = ctx.ws.dir("checkpoints") / ctx.run_id / f"merged-v{ctx.visit}"
    tokenizer = load_tokenizer(last.tokenizer)
    merged = _merge_one(ckpt, out, tokenizer)
    node = _checkpoint_node(ctx, merged, "merged", _training_data(ctx).node("train"), None, last.checkpoint_node, {})
    base = json.loads((ckpt / "adapter_config.json").read_text()).get("base_model_name_or_path")
    return StepResult(
        summary=f"adapter of {ckpt.parent.name} merged into the base it was trained on ({Path(base).name})",
        artifacts={"checkpoint": str(merged), "tokenizer": str(merged)},
        nodes={"checkpoint": node},
        details=gated,
    )


def _merge_one(adapter: Path, out: Path, tokenizer) -> Path:
    """The merged model, its generation config stopping at the tokenizer's EOS as the trainer's model did (the
    base's config came back with the base: a Gemma base stops at <eos>, its chat turns end at <end_of_turn>)."""
    from peft import AutoPeftModelForCausalLM
    from transformers.trainer_utils import align_special_tokens

    model = AutoPeftModelForCausalLM.from_pretrained(str(adapter), local_files_only=True).merge_and_unload()
    align_special_tokens(model, tokenizer)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return out
