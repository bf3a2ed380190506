"""What a person sees of training, in place of transformers' tqdm and log printing: a rich bar on a
terminal (``RichProgress``) and the run's plain step lines (``StepLines``, issue 31)."""

from __future__ import annotations

import logging
import os
import time
import warnings
from typing import Any

from transformers import TrainerCallback

from trainteam.trainers.training import console_lines
from trainteam.trainers.training.step_lines import Cadence, Clock, StepState, every_s, say_plain, step_line

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
        self.progress: Any = None  # rich's Progress, made when training begins (rank 0)
        self.task: Any = None
        self.status = ""

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero:
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        self.progress = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeRemainingColumn(),
            TextColumn("{task.fields[status]}"),
            transient=False,
            console=Console(stderr=True),  # stdout stays machine-readable (--json)
        )
        self.progress.start()
        self.task = self.progress.add_task(self.label, total=state.max_steps, completed=state.global_step, status="")

    def on_step_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.progress is not None and logs:
            parts = [
                f"{k}={logs[k]:.4g}"
                for k in ("loss", "grad_norm", "learning_rate", "reward")
                if isinstance(logs.get(k), (int, float))
            ]
            self.progress.update(self.task, status=" ".join(parts))

    def on_train_end(self, args, state, control, **kwargs):
        if self.progress is not None:
            self.progress.update(self.task, completed=state.global_step)
            self.progress.stop()
            self.progress = None


class StepLines(TrainerCallback):
    """One plain line of the run's output (``console_lines.say``) while someone listens:
    ``  sft step 40/300 · loss 1.234 · 812 tokens/s · ETA 3m12s``. The first after the first step,
    then at ``step_lines.every_s()`` (10 s on a terminal, 30 s piped; ``every`` and ``clock`` are
    for tests), and a last one when training ends. A line due at a step that logs waits for that
    step's ``on_log``, so it carries the step's own loss. Rank 0 only.
    """

    def __init__(self, label: str, *, every: float | None = None, clock: Clock = time.monotonic):
        self.label = label
        self.clock = clock
        self.cadence = Cadence(every_s() if every is None else every, clock)
        self.start = clock()
        self.steps0 = 0
        self.tokens0 = 0
        self.loss: float | None = None
        self.pending = False
        self.said_step: int | None = None

    def on_train_begin(self, args, state, control, **kwargs):
        self.start = self.clock()
        self.steps0 = state.global_step
        self.tokens0 = state.num_input_tokens_seen or 0

    def on_step_end(self, args, state, control, **kwargs):
        if state.is_world_process_zero and console_lines.listening() and self.cadence.due():
            if control.should_log:
                self.pending = True  # said in on_log, with this step's loss
            else:
                self._say(state)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if logs and isinstance(logs.get("loss"), (int, float)):
            self.loss = float(logs["loss"])
        if self.pending:
            self.pending = False
            self._say(state)

    def on_train_end(self, args, state, control, **kwargs):
        ran = state.global_step > self.steps0
        if state.is_world_process_zero and ran and (self.pending or self.said_step != state.global_step):
            self.pending = False
            self._say(state, final=True)

    def _say(self, state, final: bool = False) -> None:
        now = self.clock()
        snapshot = StepState(
            label=self.label,
            step=state.global_step,
            max_steps=int(state.max_steps or 0),
            steps_done=state.global_step - self.steps0,
            elapsed_s=now - self.start,
            tokens=int((state.num_input_tokens_seen or 0) - self.tokens0),
            loss=self.loss,
        )
        if say_plain(step_line(snapshot, final)):
            self.said_step = state.global_step
