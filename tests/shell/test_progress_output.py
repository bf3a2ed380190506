"""A piped `trainteam execute-workflow` run says how its training goes, and prints nothing of other
people's (issue 31): a step line for the train step (in the output and the run's log), no pydantic-ai
Logfire banner, no library warnings."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from spine_helpers import write_task

STEP = re.compile(r"^  pretrain step \d+/6 · loss [0-9.e+-]+ · [0-9,]+ tokens/s", re.M)


def _piped_env() -> dict[str, str]:
    """The environment of a person's shell read through a pipe by a coding agent: pydantic-ai shows
    its banner there (AI_AGENT), and not under pytest or CI, so those are taken out."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTEST_VERSION", "CI", "PYDANTIC_AI_NO_BANNER", "TRAINTEAM_PROGRESS_EVERY")}
    return {**env, "AI_AGENT": "1", "OMP_NUM_THREADS": "1", "TRAINTEAM_THREADS": "1"}


def test_a_piped_run_prints_step_lines_and_no_banner(tmp_path, ws):
    task = write_task(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "trainteam.cli", "-w", str(ws), "execute-workflow", "train_model",
                           "--task", str(task), "--run-id", "r1", "--yes"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, env=_piped_env())
    out = proc.stdout
    assert proc.returncode == 0, out[-3000:]
    train = out[out.index("▶ train (") : out.index("✓ train:")]
    assert STEP.search(train), train  # the first after the first step, and the last
    assert "logfire" not in out.lower() and "pydantic-ai v" not in out, out[:3000]
    assert not re.search(r"warn(ing)?\b", out, re.I), out
    assert not re.search("[\u2800-\u28ff\u2501]", out), out  # no live bar's last frame (spinner, bar) in a pipe
    assert "curate" in out  # the curate step still reports, in its own line
    log = (ws / "logs" / "runs" / "r1.log").read_text()
    assert STEP.search(log), log
