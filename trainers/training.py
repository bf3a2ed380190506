"""``train()``: one entry for every method, with checkpoints, resume, spike monitor and telemetry."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.trainers.config import TrainConfig
from trainteam.trainers.results import RestartProposal, TrainReport
from trainteam.trainers.trainer_args import is_main_process

METHODS = ("pretrain", "sft", "dpo", "grpo")


def _prepare_model(model, config: TrainConfig, out: Path):
    from trainteam.trainers.models import load_model
    from trainteam.trainers.trainer_args import quantization_kwargs

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
    progress: bool = True,
    apply_proposal: RestartProposal | None = None,
    reward_funcs: list | None = None,
) -> TrainReport:
    """Train ``model`` with ``method`` and return what happened.

    ``config.resume``: "auto" continues from the latest complete checkpoint in
    ``config.output_dir`` (an incomplete one is skipped with a warning), "never" starts
    fresh, a path resumes from that checkpoint. ``apply_proposal`` resumes from an
    approved spike proposal instead (rollback, skipped batches, scaled LR).
    """
    wall_start = time.perf_counter()
    if method not in METHODS:
        raise BadInput(f"method: {method!r} is not one of {', '.join(METHODS)}")
    if config.output_dir is None:
        raise BadInput("output_dir: required (checkpoints and the final model go there)")
    if tokenizer is None:
        raise BadInput("tokenizer: required")
    config = config.model_copy(update={"method": method})
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)

    from trainteam.trainers import budget
    from trainteam.trainers import method_data as D
    from trainteam.trainers.checkpoints import resolve_resume
    from trainteam.trainers.manifest import manifest_callback
    from trainteam.trainers.methods import BUILDERS
    from trainteam.trainers.progress import RichProgress, quiet_libraries
    from trainteam.trainers.trainer_args import check_runtime, choose_threads
    from trainteam.trainers.spike import SpikeMonitor, make_proposal
    from trainteam.trainers.telemetry import GracefulStop, RunHistory, Telemetry

    history = RunHistory(out)
    other = history.methods() - {method}
    if other and config.resume != "never":
        raise BadInput(f"output_dir: {out} holds a {'/'.join(sorted(other))} run; give each stage its own folder")
    quiet_libraries()
    check_runtime(config)
    from trainteam.trainers.threads import cpu_sample

    setup_mark = cpu_sample()  # the neighbours' CPU use is measured while we load, not in an idle wait
    ds = D.load_data(data, method, "data")
    eval_ds = D.load_data(eval_data, method, "eval_data") if eval_data is not None else None
    model, merged = _prepare_model(model, config, out)
    resized = not hasattr(model, "peft_config") and _fit_embeddings(model, tokenizer)
    model = _anchor_base(model, config, out, changed=resized or merged)
    threads = choose_threads(config, since=setup_mark)

    extra_cbs = []
    if apply_proposal is not None:
        from trainteam.trainers.restart import lr_sync_callback, prepare_rollback

        prepare_rollback(apply_proposal, out)
        resume_from = resolve_resume("auto", out)  # the rollback, or a checkpoint saved after it
        extra_cbs.append(lr_sync_callback())
    else:
        resume_from = resolve_resume(config.resume, out)

    interruptions = history.interruptions()

    telemetry = Telemetry(model, config.seq_len, wall_start, history)
    spike = SpikeMonitor(config.spike, method) if config.spike.enabled else None
    stop = GracefulStop()
    limit = budget.current()
    guard = budget.budget_guard(limit) if limit is not None else None
    # A caller's callbacks come before the monitor, so a metric they add to the logs can be watched.
    cbs = extra_cbs + [telemetry, stop] + list(callbacks or []) + ([spike] if spike else []) + ([guard] if guard else [])
    if progress:
        cbs.append(RichProgress(f"{method}"))
    cbs.append(manifest_callback())  # last: each checkpoint's manifest is written after everything else

    kwargs = {"reward_funcs": reward_funcs} if method == "grpo" else {}
    trainer = BUILDERS[method](config, model, tokenizer, ds, eval_ds, out, cbs, **kwargs)
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)

    # The step whose work this attempt keeps: a fresh rollback keeps only the pre-spike checkpoint's.
    if apply_proposal is not None and resume_from is not None and resume_from.name.startswith("rollback-"):
        resume_step = json.loads((Path(apply_proposal.rollback_checkpoint) / "trainer_state.json").read_text())["global_step"]
    else:
        resume_step = json.loads((resume_from / "trainer_state.json").read_text())["global_step"] if resume_from else 0
    history.record("start", method=method, resume_from=resume_from, resume_step=resume_step,
                   setup_s=round(time.perf_counter() - wall_start, 3))
    stop.install()
    try:
        result = trainer.train(resume_from_checkpoint=str(resume_from) if resume_from else None)
    except BaseException as exc:
        history.record("end", reason="interrupted", error=type(exc).__name__)
        raise
    finally:
        stop.uninstall()

    steps_done = trainer.state.global_step
    at_ceiling = guard is not None and guard.hit_at is not None
    proposal = None
    if spike is not None and spike.evidence is not None:
        reason = "spike"
        spiked = out / f"checkpoint-{steps_done}"
        final_dir = out / f"spike-{steps_done}"
        if not is_main_process():
            pass
        elif spiked.is_dir():  # kept as evidence, but never resumed from by "auto"
            if final_dir.exists():
                import shutil

                shutil.rmtree(final_dir)
            spiked.rename(final_dir)
        else:
            trainer.save_model(str(final_dir))
        if is_main_process():
            tokenizer.save_pretrained(str(final_dir))
        proposal = make_proposal(spike.evidence, out)
    elif (stop.requested or at_ceiling) and (out / f"checkpoint-{steps_done}").is_dir():
        # the checkpoint saved on the signal (or at the budget's ceiling) is the result; "final" means done
        reason = "interrupted" if stop.requested else "budget"
        final_dir = out / f"checkpoint-{steps_done}"
    elif at_ceiling:  # the ceiling came before the first step: nothing to keep
        reason, final_dir = "budget", out
    else:
        reason = "interrupted" if stop.requested else "completed"
        final_dir = out / "final"
        trainer.save_model(str(final_dir))
        if is_main_process():
            tokenizer.save_pretrained(str(final_dir))
    history.record("end", reason=reason, step=steps_done, step_time=telemetry.step_time)

    from trainteam.trainers.checkpoints import complete_checkpoints

    metrics = dict(result.metrics)
    if eval_ds is not None and method in ("pretrain", "sft", "dpo") and reason != "budget":
        metrics.update(trainer.evaluate())
    tel = telemetry.summary(interruptions)
    tel["threads"] = threads
    losses = telemetry.losses
    if losses:
        metrics.setdefault("final_loss", losses[-1][1])
    return TrainReport(
        method=method, steps_done=steps_done, losses=losses, metrics=metrics,
        checkpoints=complete_checkpoints(out), final_dir=final_dir, stopped_reason=reason,
        proposal=proposal, telemetry=tel, resumed_from=resume_from, log_history=telemetry.logs,
        spike_evidence=spike.evidence if reason == "spike" else None,
    )
