"""``train()``: one entry for every method, with checkpoints, resume, spike monitor and telemetry.

``train`` reads as its phases: check the request, set up (data, model, threads), find where to
resume, watch the run (telemetry, spike monitor, stop signal, budget), build the method's trainer,
run it, keep its result (final folder, the checkpoint a stop saved, or a spike's evidence), report.
The callbacks that watch (``progress``, ``spike``, ``telemetry``) import transformers: they are
imported where the run is set up, so importing this module stays light.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainteam.core import heap
from trainteam.core.errors import BadInput
from trainteam.trainers.methods import method_data as D
from trainteam.trainers.methods.method_registry import get_method, method_signals
from trainteam.trainers.planning.pace import pace_check
from trainteam.trainers.training import budget, console_lines
from trainteam.trainers.training.bf16_base import frozen_in_bf16
from trainteam.trainers.training.checkpoints import complete_checkpoints, resolve_resume
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.labelled_logits import score_labelled_positions_only
from trainteam.trainers.training.manifest import manifest_callback
from trainteam.trainers.training.models import load_model
from trainteam.trainers.training.restart import lr_sync_callback, prepare_rollback
from trainteam.trainers.training.results import RestartProposal, TrainReport
from trainteam.trainers.training.step_lines import stderr_is_terminal
from trainteam.trainers.training.threads import cpu_sample
from trainteam.trainers.training.trainer_args import check_runtime, choose_threads, is_main_process, quantization_kwargs


def _prepare_model(model, config: TrainConfig, out: Path):
    if isinstance(model, (str, Path)):
        q = quantization_kwargs(config)
        if q:
            from transformers import AutoModelForCausalLM

            model = AutoModelForCausalLM.from_pretrained(str(model), local_files_only=True, **q)
        else:
            model = load_model(Path(model), attn_implementation=config.attn_implementation)
        if hasattr(model, "peft_config"):
            # A stage that starts from an adapter checkpoint starts from base + adapter: merged,
            # so a new adapter (or DPO's adapter-free reference) builds on the previous stage.
            model = model.merge_and_unload()
            model.requires_grad_(True)
            return model, True
    elif config.lora and config.lora.quantize_4bit:
        raise BadInput("lora.quantize_4bit: QLoRA loads the base in 4-bit; pass the model as a local folder path")
    return model, False


def _fit_embeddings(model, tokenizer) -> bool:
    """Functional tokens added to the tokenizer after the model was built need embedding rows."""
    emb = model.get_input_embeddings()
    if emb is not None and len(tokenizer) > emb.weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))
        return True
    return False


def _anchor_base(model, config: TrainConfig, out: Path, changed: bool = False):
    if config.lora is not None and not hasattr(model, "peft_config"):
        # PEFT records the base model's location in the adapter; an in-memory (or resized) base
        # gets one on disk so the saved adapter loads on its own.
        name = str(getattr(model.config, "_name_or_path", "") or "")
        if changed or not name or not Path(name).is_dir():
            base = out / "base"
            if not (base / "config.json").is_file() and is_main_process():
                model.save_pretrained(str(base))
            model.config._name_or_path = str(base.resolve())
            model.name_or_path = str(base.resolve())
    return model


def train(
    method: str,
    config: TrainConfig,
    model: Any,
    data: Any,
    *,
    tokenizer,
    eval_data: Any = None,
    callbacks: list | None = None,
    progress: bool | str = True,
    apply_proposal: RestartProposal | None = None,
    reward_funcs: list | None = None,
) -> TrainReport:
    """Train ``model`` with ``method`` and return what happened.

    ``config.resume``: "auto" continues from the latest complete checkpoint in
    ``config.output_dir`` (an incomplete one is skipped with a warning), "never" starts
    fresh, a path resumes from that checkpoint. ``apply_proposal`` resumes from an
    approved spike proposal instead (rollback, skipped batches, scaled LR).
    ``progress``: True shows a rich bar; False none; a string labels the run's step lines
    (e.g. "probe 3 (lr 5e-4)") and shows no bar. The step lines follow ``console_lines.listening()``.
    """
    wall_start = time.perf_counter()
    config, out = _checked(method, config, tokenizer)
    history, ds, eval_ds, model, threads = _setup(method, config, out, model, data, eval_data, tokenizer)
    resume_from, resume_cbs = _resume_point(config, out, apply_proposal)
    interruptions = history.interruptions()
    watch = _watch(method, config, model, wall_start, history, resume_cbs, callbacks, progress)
    trainer = _build_trainer(method, config, model, tokenizer, ds, eval_ds, out, watch.callbacks, reward_funcs)
    history.record(
        "start",
        method=method,
        resume_from=resume_from,
        resume_step=_resume_step(apply_proposal, resume_from),
        setup_s=round(time.perf_counter() - wall_start, 3),
    )
    result = _run(trainer, history, watch.stop, resume_from)
    steps_done = trainer.state.global_step
    reason, final_dir, proposal = _keep_result(trainer, tokenizer, out, steps_done, watch)
    history.record("end", reason=reason, step=steps_done, step_time=watch.telemetry.step_time)

    metrics = dict(result.metrics)
    if eval_ds is not None and get_method(method).evaluates and reason != "budget":
        metrics.update(trainer.evaluate())
    tel = watch.telemetry.summary(interruptions)
    tel["threads"] = threads
    if watch.pace is not None and watch.pace.reading is not None:
        tel.update(watch.pace.reading.numbers())
    tel["max_steps"] = int(trainer.state.max_steps)  # with num_train_epochs: what the trainer derived from the data
    losses = watch.telemetry.losses
    if losses:
        metrics.setdefault("final_loss", losses[-1][1])
    return TrainReport(
        method=method,
        steps_done=steps_done,
        losses=losses,
        metrics=metrics,
        checkpoints=complete_checkpoints(out),
        final_dir=final_dir,
        stopped_reason=reason,
        proposal=proposal,
        telemetry=tel,
        resumed_from=resume_from,
        log_history=watch.telemetry.logs,
        spike_evidence=_spike_evidence(watch, reason),
    )


def _spike_evidence(watch: _Watch, reason: str) -> Any:
    """The spike monitor's evidence when the run stopped for a spike, else None."""
    if reason != "spike":
        return None
    if watch.spike is None:
        raise RuntimeError("the run stopped for a spike, but no spike monitor watched it")
    return watch.spike.evidence


def _checked(method: str, config: TrainConfig, tokenizer) -> tuple[TrainConfig, Path]:
    """The request, refused before anything loads; the config for this method and its (created) folder."""
    get_method(method)  # BadInput naming the known methods
    output_dir = config.output_dir
    if output_dir is None:
        raise BadInput("output_dir: required (checkpoints and the final model go there)")
    if tokenizer is None:
        raise BadInput("tokenizer: required")
    config = config.model_copy(update={"method": method})
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    return config, out


def _setup(method: str, config: TrainConfig, out: Path, model, data, eval_data, tokenizer):
    """The folder's run history, the data, the model ready to train, and the torch threads to use."""
    from trainteam.trainers.training.progress import quiet_libraries
    from trainteam.trainers.training.telemetry import RunHistory

    history = RunHistory(out)
    other = history.methods() - {method}
    if other and config.resume != "never":
        raise BadInput(f"output_dir: {out} holds a {'/'.join(sorted(other))} run; give each stage its own folder")
    quiet_libraries()
    check_runtime(config)
    heap.give_back()  # what an earlier training or evaluation in this process freed (a search's probes)
    setup_mark = cpu_sample()  # the neighbours' CPU use is measured while we load, not in an idle wait
    ds = D.load_data(data, method, "data")
    eval_ds = D.load_data(eval_data, method, "eval_data") if eval_data is not None else None
    model, merged = _prepare_model(model, config, out)
    resized = not hasattr(model, "peft_config") and _fit_embeddings(model, tokenizer)
    model = _anchor_base(model, config, out, changed=resized or merged)
    model = frozen_in_bf16(model, config)  # after the base is anchored: an adapter names fp32 weights
    return history, ds, eval_ds, model, choose_threads(config, since=setup_mark)


def _resume_point(config: TrainConfig, out: Path, apply_proposal: RestartProposal | None) -> tuple[Path | None, list]:
    """The checkpoint to resume from, and the callbacks an approved restart needs."""
    if apply_proposal is None:
        return resolve_resume(config.resume, out), []
    prepare_rollback(apply_proposal, out)
    return resolve_resume("auto", out), [lr_sync_callback()]  # the rollback, or a checkpoint saved after it


def _resume_step(apply_proposal: RestartProposal | None, resume_from: Path | None) -> int:
    """The step whose work this attempt keeps: a fresh rollback keeps only the pre-spike checkpoint's."""
    if apply_proposal is not None and resume_from is not None and resume_from.name.startswith("rollback-"):
        return json.loads((Path(apply_proposal.rollback_checkpoint) / "trainer_state.json").read_text())["global_step"]
    return json.loads((resume_from / "trainer_state.json").read_text())["global_step"] if resume_from else 0


@dataclass
class _Watch:
    """What watches the run from inside the trainer, and the callbacks in the order the trainer calls them."""

    telemetry: Any
    spike: Any | None
    stop: Any
    guard: Any | None
    callbacks: list
    pace: Any | None = None


def _watch(
    method: str,
    config: TrainConfig,
    model,
    wall_start: float,
    history,
    restart_cbs: list,
    callbacks: list | None,
    progress: bool | str,
) -> _Watch:
    """Telemetry, the spike monitor, the stop signal and the budget guard, with the callbacks in order.

    What a person sees: ``progress=True`` a rich bar on a terminal (or wherever nobody listens to the
    run's lines); the step lines (``progress.StepLines``) whenever ``console_lines.listening()``,
    unless that bar is live on the terminal. A string is the lines' label (a probe's), with no bar."""
    from trainteam.trainers.training.progress import RichProgress, StepLines
    from trainteam.trainers.training.spike import SpikeMonitor
    from trainteam.trainers.training.telemetry import GracefulStop, RankAgreement, Telemetry

    telemetry = Telemetry(model, config.max_length, wall_start, history)
    pace = pace_check(config, history)  # the first steps' pace against the plan's, re-planned aloud
    spike = SpikeMonitor(config.spike, method_signals(method, config.spike)) if config.spike.enabled else None
    stop = GracefulStop()
    limit = budget.current()
    guard = budget.budget_guard(limit) if limit is not None else None
    # A caller's callbacks come before the monitor, so a metric they add to the logs can be watched.
    ticks = budget.step_clock_callback()  # first: everything after it reads the clock this step moved
    cbs = (
        ([ticks] if ticks else [])
        + restart_cbs
        + [telemetry]
        + ([pace] if pace else [])
        + [stop]
        + list(callbacks or [])
        + ([spike] if spike else [])
        + ([guard] if guard else [])
    )
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        cbs.append(RankAgreement())  # after every callback that may stop or save the run
    label = progress if isinstance(progress, str) and progress.strip() else method
    bar = progress is True and (stderr_is_terminal() or not console_lines.listening())
    if bar:
        cbs.append(RichProgress(method))
    if not (bar and stderr_is_terminal()):  # a live bar on a terminal says it all; a line would break it
        cbs.append(StepLines(label))
    cbs.append(manifest_callback())  # last: each checkpoint's manifest is written after everything else
    return _Watch(telemetry, spike, stop, guard, cbs, pace)


def _build_trainer(
    method: str, config: TrainConfig, model, tokenizer, ds, eval_ds, out: Path, cbs: list, reward_funcs: list | None
):
    """The method's trainer (its record's ``build``), without the library's own log printer."""
    from transformers.trainer_callback import PrinterCallback

    record = get_method(method)
    rewards = reward_funcs if record.needs_rewards else None
    score_labelled_positions_only()  # logits only where the loss is, on a CPU too (labelled_logits.py)
    trainer = record.build(config, model, tokenizer, ds, eval_ds, out, cbs, reward_funcs=rewards)
    trainer.remove_callback(PrinterCallback)
    return trainer


def _run(trainer, history, stop, resume_from: Path | None):
    """The library's training loop, with the stop signal installed; an exception is recorded, then raised."""
    stop.install()
    try:
        return trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    except BaseException as exc:
        history.record("end", reason="interrupted", error=type(exc).__name__)
        raise
    finally:
        stop.uninstall()


def _keep_result(
    trainer, tokenizer, out: Path, steps_done: int, watch: _Watch
) -> tuple[str, Path, RestartProposal | None]:
    """Why the run stopped, the folder that holds its result, and a restart proposal after a spike."""
    from trainteam.trainers.training.spike import make_proposal

    at_ceiling = watch.guard is not None and watch.guard.hit_at is not None
    if watch.spike is not None and watch.spike.evidence is not None:
        final_dir = out / f"spike-{steps_done}"
        _keep_spike_evidence(trainer, tokenizer, out / f"checkpoint-{steps_done}", final_dir)
        return "spike", final_dir, make_proposal(watch.spike.evidence, out)
    if (watch.stop.requested or at_ceiling) and (out / f"checkpoint-{steps_done}").is_dir():
        # the checkpoint saved on the signal (or at the budget's ceiling) is the result; "final" means done
        return ("interrupted" if watch.stop.requested else "budget"), out / f"checkpoint-{steps_done}", None
    if at_ceiling:  # the ceiling came before the first step: nothing to keep
        return "budget", out, None
    final_dir = out / "final"
    trainer.save_model(str(final_dir))
    if is_main_process():
        tokenizer.save_pretrained(str(final_dir))
    return ("interrupted" if watch.stop.requested else "completed"), final_dir, None


def _keep_spike_evidence(trainer, tokenizer, spiked: Path, final_dir: Path) -> None:
    """The checkpoint saved at the spike becomes ``spike-N``: kept as evidence, never resumed from by "auto"."""
    if not is_main_process():
        pass
    elif spiked.is_dir():
        if final_dir.exists():
            shutil.rmtree(final_dir)
        spiked.rename(final_dir)
    else:
        trainer.save_model(str(final_dir))
    if is_main_process():
        tokenizer.save_pretrained(str(final_dir))
