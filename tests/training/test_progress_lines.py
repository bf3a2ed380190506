"""The run's plain progress lines (issue 31): training steps, probes, evaluation.

Real training on tiny models; the cadence is driven by TRAINTEAM_PROGRESS_EVERY=0 (a line due at
every step or batch) or an injected clock, so nothing here depends on the machine's speed.
"""

from __future__ import annotations

import re

from rich.console import Console

from trainteam.trainers.training import console_lines, step_lines
from trainteam.trainers.training.step_lines import Cadence, RowLines, StepState, duration, every_s, step_line

STEP = re.compile(
    r"^  (?P<label>.+) step (?P<step>\d+)/(?P<max>\d+) · loss [0-9.e+-]+ · [0-9,]+ tokens/s"
    r"(?: · (?:ETA \d+[smh0-9]*|finished after \S+|stopped after \S+))?$"
)


class FakeClock:
    def __init__(self, start: float = 100.0):
        self.now = start

    def __call__(self) -> float:
        return self.now


def _config(tmp_path, **kw):
    from trainteam.trainers import TrainConfig

    base = dict(
        output_dir=str(tmp_path / "out"),
        max_steps=5,
        per_device_batch_size=8,
        seq_len=32,
        learning_rate=1e-3,
        save_steps=None,
        warmup_steps=0,
        resume="never",
    )
    return TrainConfig(**{**base, **kw})


def _rendered(lines: list[str]) -> list[str]:
    """What a person reads: each line rendered as rich markup, the way the engine prints it."""
    console = Console(width=400, color_system=None, force_terminal=False, record=True, file=open("/dev/null", "w"))
    out = []
    for text in lines:
        console.print(text, highlight=False)
        out.append(console.export_text(clear=True).rstrip("\n"))
    return out


# -- the pieces -------------------------------------------------------------------------------------


def test_duration_and_line_format():
    assert [duration(s) for s in (0, 40.4, 192, 3720)] == ["0s", "40s", "3m12s", "1h02m"]
    s = StepState(label="sft", step=40, max_steps=300, steps_done=40, elapsed_s=30.0, tokens=24360, loss=1.2341)
    assert step_line(s) == "  sft step 40/300 · loss 1.234 · 812 tokens/s · ETA 3m15s"
    done = StepState(label="sft", step=300, max_steps=300, steps_done=300, elapsed_s=192.0, tokens=0, loss=None)
    assert step_line(done, final=True) == "  sft step 300/300 · finished after 3m12s"


def test_cadence_terminal_piped_and_override(monkeypatch):
    monkeypatch.delenv(step_lines.EVERY_ENV, raising=False)
    monkeypatch.setattr(step_lines, "stderr_is_terminal", lambda: True)
    assert every_s() == 10.0
    monkeypatch.setattr(step_lines, "stderr_is_terminal", lambda: False)
    assert every_s() == 30.0
    monkeypatch.setenv(step_lines.EVERY_ENV, "0")
    assert every_s() == 0.0
    monkeypatch.setenv(step_lines.EVERY_ENV, "soon")  # not a number: the default stays
    assert every_s() == 30.0

    clock = FakeClock()
    c = Cadence(10.0, clock)
    due = []
    for _ in range(7):
        due.append(c.due())
        clock.now += 4.0
    assert due == [True, False, False, True, False, False, True]  # at 0, 12, 24 s


def test_row_lines_need_a_listener_and_the_cadence():
    clock = FakeClock()
    said: list[str] = []
    rows = RowLines("evaluation (exact match)", 200, clock=clock, every=30.0)
    clock.now += 40.0
    assert rows.done(64) is False  # nobody listens: nothing, anywhere
    with console_lines.lines_to(said.append):
        assert rows.done(80) is True  # 40 s in: due
        clock.now += 1.0
        assert rows.done(100) is False  # 1 s after the last line
        clock.now += 39.0
        assert rows.done(160) is True
    assert said == [
        "  evaluation: exact match 80/200 rows · ETA 1m00s",
        "  evaluation: exact match 160/200 rows · ETA 20s",
    ]


# -- real training ----------------------------------------------------------------------------------


def test_training_says_a_line_per_step_when_due_every_step(tmp_path, tiny, tok, arith, monkeypatch, capsys):
    from trainteam.trainers import train

    monkeypatch.setenv(step_lines.EVERY_ENV, "0")
    said: list[str] = []
    with console_lines.lines_to(said.append):
        report = train("sft", _config(tmp_path), tiny, arith[0][:80], tokenizer=tok, progress=True)
    assert report.steps_done == 5
    steps = [line for line in _rendered(said) if not line.startswith("pace: ")]  # the planner's pace check speaks too
    parsed = [STEP.match(line) for line in steps]
    assert all(parsed), said
    assert [(m["label"], int(m["step"]), int(m["max"])) for m in parsed] == [("sft", k, 5) for k in range(1, 6)]
    assert "ETA" in steps[0] and "ETA" not in steps[-1]
    assert "━" not in capsys.readouterr().err  # stderr is piped here: the lines, not a bar as well


def test_a_probe_label_is_the_line_and_markup_stays_text(tmp_path, tiny, tok, arith, monkeypatch):
    from trainteam.trainers import train

    monkeypatch.setenv(step_lines.EVERY_ENV, "0")
    said: list[str] = []
    with console_lines.lines_to(said.append):
        train("sft", _config(tmp_path, max_steps=3), tiny, arith[0][:40], tokenizer=tok, progress="probe 3 [lr 5e-4]")
    shown = [line for line in _rendered(said) if not line.startswith("pace: ")]  # the planner's pace check speaks too
    assert len(shown) == 3 and all(line.startswith("  probe 3 [lr 5e-4] step ") for line in shown), shown


def test_nobody_listening_prints_nothing(tmp_path, tiny, tok, arith, monkeypatch, capsys):
    from trainteam.trainers import train

    monkeypatch.setenv(step_lines.EVERY_ENV, "0")
    train("sft", _config(tmp_path, max_steps=2), tiny, arith[0][:20], tokenizer=tok, progress=False)
    captured = capsys.readouterr()
    assert "step" not in captured.err and "step" not in captured.out


def test_the_cadence_with_an_injected_clock(tmp_path, tiny, tok, arith, monkeypatch):
    """Each step takes 4 s on the fake clock; a line every 10 s: steps 1, 4, 7, 10 — then no last line,
    the last step has been said."""
    from transformers import TrainerCallback

    from trainteam.trainers import train
    from trainteam.trainers.training.progress import StepLines

    monkeypatch.delenv(step_lines.EVERY_ENV, raising=False)
    clock = FakeClock()

    class Tick(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            clock.now += 4.0

    said: list[str] = []
    with console_lines.lines_to(said.append):
        train(
            "sft",
            _config(tmp_path, max_steps=10),
            tiny,
            arith[0][:80],
            tokenizer=tok,
            progress=False,
            callbacks=[Tick(), StepLines("timed", every=10.0, clock=clock)],
        )
    timed = [STEP.match(line) for line in _rendered(said) if line.startswith("  timed ")]
    assert [int(m["step"]) for m in timed] == [1, 4, 7, 10]
    # the built-in line (label "sft", the real clock, 30 s piped): the first step, and the last
    assert [int(STEP.match(x)["step"]) for x in _rendered(said) if x.startswith("  sft ")][0] == 1


# -- evaluation -------------------------------------------------------------------------------------


def test_evaluation_loops_say_rows_done(tiny, tok, arith, monkeypatch):
    from trainteam.trainers.evaluation.battery import exact_match, greedy_generations, heldout_loss

    monkeypatch.setenv(step_lines.EVERY_ENV, "0")
    ev = arith[1][:20]
    said: list[str] = []
    with console_lines.lines_to(said.append):
        heldout_loss(tiny, tok, ev, batch_size=8)
        exact_match(tiny, tok, ev, max_new_tokens=4, batch_size=8)
        greedy_generations(tiny, tok, [r["prompt"] for r in ev[:5]], max_new_tokens=2, batch_size=4)
    assert [re.sub(r" · ETA \S+$", "", x) for x in said] == [
        "  evaluation: held-out loss 8/20 rows",
        "  evaluation: held-out loss 16/20 rows",
        "  evaluation: held-out loss 20/20 rows",
        "  evaluation: exact match 8/20 rows",
        "  evaluation: exact match 16/20 rows",
        "  evaluation: exact match 20/20 rows",
        "  generation 4/5 rows",
        "  generation 5/5 rows",
    ]
    assert all("ETA" in x for x in said if not re.search(r"(\d+)/\1 rows$", x))


def test_evaluation_silent_without_a_listener(tiny, tok, arith, monkeypatch, capsys):
    from trainteam.trainers.evaluation.battery import heldout_loss

    monkeypatch.setenv(step_lines.EVERY_ENV, "0")
    heldout_loss(tiny, tok, arith[1][:10], batch_size=4)
    assert "evaluation" not in capsys.readouterr().err
