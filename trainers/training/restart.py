"""Apply an approved RestartProposal: a rollback checkpoint advanced past the bad batches.

The rollback folder is a copy of the pre-spike checkpoint (hard links where possible)
whose trainer state and LR scheduler are moved ``skip_batches`` steps on — so the
Trainer's own data fast-forward skips exactly those batches — and whose learning
rates are scaled by ``lr_scale``.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from trainteam.core.errors import BadInput
from trainteam.trainers.training.checkpoints import is_complete
from trainteam.trainers.training.manifest import write_manifest
from trainteam.trainers.training.results import RestartProposal


def _link_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def prepare_rollback(proposal: RestartProposal, output_dir: Path, timeout_s: float = 600.0) -> Path:
    """Rank 0 writes the rollback folder; other ranks of a launched run wait for it.

    Written once: the same approved proposal applied again (a crash, or more budget granted
    mid-restart) finds it ready, and training continues from the newest checkpoint after it."""
    src = Path(proposal.rollback_checkpoint)
    dst = Path(output_dir) / f"rollback-{proposal.spike_step}"
    ready = dst / ".ready"
    if ready.is_file():
        return dst
    if not is_complete(src):
        raise BadInput(f"proposal.rollback_checkpoint: {src} is not a complete checkpoint")
    if int(os.environ.get("RANK", "0")) != 0:
        import time

        deadline = time.monotonic() + timeout_s
        while not ready.is_file():
            if time.monotonic() > deadline:
                raise TimeoutError(f"rank {os.environ.get('RANK')}: {dst} was never prepared by rank 0")
            time.sleep(0.2)
        return dst
    _write_rollback(proposal, src, dst)
    write_manifest(dst)  # the rewritten state files verify too; .ready last
    ready.write_text("ok")
    return dst


def _write_rollback(proposal: RestartProposal, src: Path, dst: Path) -> None:
    import torch

    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst, copy_function=_link_copy)
    skip = proposal.skip_batches

    state_path = dst / "trainer_state.json"
    state = json.loads(state_path.read_text())
    state["global_step"] = int(state["global_step"]) + skip
    state_path.unlink()  # hard link: never write through to the original checkpoint
    state_path.write_text(json.dumps(state, indent=2))

    sched_path = dst / "scheduler.pt"
    if sched_path.is_file():
        sched = torch.load(sched_path, weights_only=False)
        sched["last_epoch"] = sched.get("last_epoch", 0) + skip
        sched["_step_count"] = sched.get("_step_count", 0) + skip
        sched["base_lrs"] = [lr * proposal.lr_scale for lr in sched.get("base_lrs", [])]
        sched["_last_lr"] = [lr * proposal.lr_scale for lr in sched.get("_last_lr", [])]
        sched_path.unlink()
        torch.save(sched, sched_path)

    opt_path = dst / "optimizer.pt"
    if opt_path.is_file():
        opt = torch.load(opt_path, weights_only=False)
        for group in opt.get("param_groups", []):
            for key in ("lr", "initial_lr"):
                if key in group:
                    group[key] = group[key] * proposal.lr_scale
        opt_path.unlink()
        torch.save(opt, opt_path)


def lr_sync_callback():
    """A callback that, once the checkpoint is loaded, sets each group's LR to what the
    (advanced, scaled) scheduler says for the current step — otherwise the first update
    after the rollback would use the LR stored in the optimizer at the checkpoint."""
    from transformers import TrainerCallback

    class SyncLR(TrainerCallback):
        def on_train_begin(self, args, state, control, optimizer=None, lr_scheduler=None, **kw):
            sched = getattr(lr_scheduler, "scheduler", lr_scheduler)
            lambdas = getattr(sched, "lr_lambdas", None)
            if optimizer is None or sched is None or lambdas is None:
                return
            lrs = [base * fn(sched.last_epoch) for base, fn in zip(sched.base_lrs, lambdas, strict=True)]
            for group, lr in zip(optimizer.param_groups, lrs, strict=True):
                group["lr"] = lr
            sched._last_lr = lrs

    return SyncLR()
