"""A rich progress bar with per-step status, in place of transformers' tqdm and log printing."""

from __future__ import annotations

import logging
import os
import warnings

from transformers import TrainerCallback


_QUIET = False


def quiet_libraries() -> None:
    """Silence the progress bars and advisory warnings of datasets/transformers/TRL (once)."""
    global _QUIET
    if _QUIET:
        return
    _QUIET = True
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import datasets

        datasets.disable_progress_bars()
        datasets.logging.set_verbosity_error()
    except ImportError:  # pragma: no cover
        pass
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    for name in ("trl", "peft", "accelerate"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", message=".*gradient_checkpointing.*")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")


class RichProgress(TrainerCallback):
    def __init__(self, label: str):
        self.label = label
        self.progress = None
        self.task = None
        self.status = ""

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
            TimeRemainingColumn(), TextColumn("{task.fields[status]}"), transient=False,
            console=Console(stderr=True),  # stdout stays machine-readable (--json)
        )
        self.progress.start()
        self.task = self.progress.add_task(self.label, total=state.max_steps, completed=state.global_step, status="")

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is not None and logs:
            parts = [f"{k}={logs[k]:.4g}" for k in ("loss", "grad_norm", "learning_rate", "reward") if isinstance(logs.get(k), (int, float))]
            self.progress.update(self.task, status=" ".join(parts))

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
            self.progress.stop()
            self.progress = None
