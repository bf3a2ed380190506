"""A training stage run as launched processes: ``train()``'s twin for a task's ``distributed:`` block.

``train_launched`` writes what every rank reads (the tokenizer, the model as a folder, the data
as a file, the job: ``launch_worker.WorkerJob``), the accelerate config and the command of every
node (``launch.py``), and starts this machine's command as a child process: ``accelerate launch``
(or ``torchrun``), which starts one ``launch_worker`` per local rank. It then supervises:

- a rank that dies (killed, out of memory, an exception) before writing its record fails the
  attempt at once: every other process of the launch is stopped (SIGTERM, then SIGKILL), the
  launcher is waited for (no zombie), and the attempt is recorded in ``launch/attempts.jsonl``;
- the next attempt (up to ``max_restarts``) starts a fresh launch on a fresh port; its ranks
  resume from the newest complete checkpoint (``resume: auto``), so only the steps since that
  checkpoint are trained again; after the last one the step fails naming the dead rank;
- the launcher is started through a small shim that asks Linux to SIGTERM it if this process
  dies (``PR_SET_PDEATHSIG``): a workflow process killed with -9 leaves no training behind.

Rank 0 trains with the same ``train()`` as a single process, so its run history (curves), spike
monitor, checkpoints and telemetry are the run's; it writes its ``TrainReport`` to
``launch/ranks/report.json`` and that is what this function returns. The budget's ceiling travels
as the seconds left; a callback in every rank (``telemetry.RankAgreement``) makes all ranks stop
and save at the same step. A caller's in-process callbacks cannot reach the ranks.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel, Field

from trainteam.core.errors import TrainteamError
from trainteam.curation.answers import AnswerSpec
from trainteam.curation.jsonl import write_jsonl
from trainteam.trainers.launch.node_commands import LaunchSpec, free_port, launch_commands, write_accelerate_config
from trainteam.trainers.launch.worker import WorkerJob
from trainteam.trainers.planning import detect_hardware, plan
from trainteam.trainers.training import budget
from trainteam.trainers.training.config import DistributedSpec, ModelSpec, TrainConfig
from trainteam.trainers.training.results import RestartProposal, TrainReport

log = logging.getLogger("trainteam.launched")
POLL_S = 0.05  # how often the supervisor looks at the ranks: often enough to see which died first
STOP_GRACE_S = 5.0
# torch elastic's words: its summary ("exitcode  : -9 (pid: 123)") and "failed (exitcode: -9) local_rank: 1
# (pid: 123)"; and the ranks its agent found alive and stopped ("Sending process 123 closing signal SIGTERM")
_EXIT_RE = re.compile(r"exitcode\s*:\s*(-?\d+)\)?\s*(?:\(pid:|local_rank:\s*\d+\s*\(pid:)\s*(\d+)\)")
_CLOSING_RE = re.compile(r"Sending process (\d+) closing signal")

# Run by this interpreter in front of the launcher: SIGTERM the launcher when its parent dies.
_SHIM = (
    "import ctypes, os, signal, sys\n"
    "try:\n"
    "    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
    "except (AttributeError, OSError):\n"
    "    pass\n"
    "if os.getppid() != int(sys.argv[1]):\n"
    "    sys.exit(1)  # the parent died before the death signal was armed\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


class LaunchFailed(TrainteamError):
    """Every attempt of a launched stage lost a rank."""


def train_launched(
    method: str,
    config: TrainConfig,
    model: Any,
    data: Any,
    *,
    tokenizer,
    dist: DistributedSpec,
    eval_data: Any = None,
    apply_proposal: RestartProposal | None = None,
    answer: AnswerSpec | None = None,
) -> TrainReport:
    """Train like ``training.train`` but in ``dist.num_processes`` launched processes (see the module
    docstring); returns rank 0's report. ``config.output_dir`` is the stage's folder, as for ``train``."""
    assert config.output_dir is not None  # the stage's folder, set by the step
    out = Path(config.output_dir)
    ldir = out / "launch"
    ranks = ldir / "ranks"
    config = config.model_copy(update={"method": method, **dist.train_fields()})
    model_path = _model_folder(model, tokenizer, ldir)
    job = WorkerJob(
        method=method,
        config=config,
        model=ModelSpec(path=model_path),
        tokenizer=_tokenizer_folder(tokenizer, ldir),
        data=_data_file(data, ldir / "data.jsonl"),
        results_dir=ranks,
        model_path=model_path,
        eval_data=_data_file(eval_data, ldir / "eval.jsonl") if eval_data is not None else None,
        apply_proposal=apply_proposal,
        answer=answer,
    )
    failures: list[dict] = []
    for attempt in range(1, dist.max_restarts + 2):
        c = budget.current()  # what the run may still spend, as each launch starts
        job_file = job.model_copy(
            update={
                "budget_left_s": c.left_s() if c is not None else None,
                "budget_allowed_s": c.allowed_s if c is not None else 0.0,
            }
        ).save(ldir / "job.json")
        spec = _spec(config, model_path, dist, ldir, job_file)
        if attempt == 1:
            _write_other_nodes(spec, dist, ldir)
        outcome = _attempt(spec, dist, ranks, ldir, attempt)
        with open(ldir / "attempts.jsonl", "a") as fh:
            fh.write(json.dumps(outcome) + "\n")
        if outcome["ok"]:
            return TrainReport.model_validate_json((ranks / "report.json").read_text())
        failures.append(outcome)
        log.warning("launched %s, attempt %d: %s", method, attempt, outcome["why"])
    raise LaunchFailed(
        f"distributed {method}: {failures[-1]['why']} (attempt {len(failures)} of "
        f"{dist.max_restarts + 1}; log {failures[-1]['log']})"
    )


def _model_folder(model: Any, tokenizer, ldir: Path) -> Path:
    """The model every rank loads: a folder as given, or an in-memory model saved once (its weights
    do not change between attempts: a resumed attempt loads the checkpoint over them)."""
    if isinstance(model, (str, Path)):
        return Path(model)
    folder = ldir / "init"
    if not (folder / "config.json").is_file():
        model.save_pretrained(str(folder))
        tokenizer.save_pretrained(str(folder))
    return folder


def _tokenizer_folder(tokenizer, ldir: Path) -> Path:
    folder = ldir / "tokenizer"
    if not (folder / "tokenizer_config.json").is_file():
        tokenizer.save_pretrained(str(folder))
    return folder


def _data_file(data: Any, path: Path) -> Path:
    """Rows in memory (the recipe search's split, DPO pairs) are written for the ranks to read."""
    if isinstance(data, (str, Path)):
        return Path(data)
    return write_jsonl(list(data), path)


def _spec(config: TrainConfig, model_path: Path, dist: DistributedSpec, ldir: Path, job_file: Path) -> LaunchSpec:
    """The accelerate config and the commands, on a fresh port for each attempt on one machine."""
    per_node = dist.num_processes // dist.num_machines
    hw = detect_hardware(processes=per_node)
    if dist.num_machines > 1:
        hw = hw.model_copy(update={"nodes": dist.num_machines, "fabric": "ethernet"})
    p = plan(config, ModelSpec(path=model_path), hw, strict=False)
    port = dist.main_process_port or (free_port() if dist.num_machines == 1 else 29500)
    ip = dist.main_process_ip or "127.0.0.1"
    cfg_file = None
    if dist.launcher == "accelerate":
        cfg_file = write_accelerate_config(
            p, ldir, main_process_ip=dist.main_process_ip if dist.num_machines > 1 else None, main_process_port=port
        )
    return launch_commands(
        p,
        "trainteam.trainers.launch.worker",
        [str(job_file)],
        launcher=dist.launcher,
        module=True,
        config_file=cfg_file,
        main_process_ip=ip,
        main_process_port=port,
    )


def _write_other_nodes(spec: LaunchSpec, dist: DistributedSpec, ldir: Path) -> None:
    """The other machines' commands, for a person to start there (the job's paths must be shared)."""
    for rank in range(dist.num_machines):
        if rank != dist.machine_rank:
            (ldir / f"node{rank}.sh").write_text("#!/bin/sh\n" + spec.shell(rank) + "\n")


def _attempt(spec: LaunchSpec, dist: DistributedSpec, ranks: Path, ldir: Path, attempt: int) -> dict:
    """One launch, supervised to its end; what happened, as a record."""
    ranks.mkdir(parents=True, exist_ok=True)
    for stale in [*ranks.glob("rank*.pid"), *ranks.glob("rank*.json"), ranks / "report.json"]:
        stale.unlink(missing_ok=True)
    per_node = dist.num_processes // dist.num_machines
    watch = _Watch(ranks, [dist.machine_rank * per_node + i for i in range(per_node)])
    log_path = ldir / f"attempt{attempt}.log"
    t0 = time.monotonic()
    with open(log_path, "w") as log_fh:
        proc = _start(spec, dist.machine_rank, log_fh)
        try:
            alive_at_stop = _supervise(proc, watch)
        except BaseException:  # this thread interrupted: the launch does not outlive it
            _stop_all(proc, watch.processes())
            raise
    rc = proc.returncode
    lost = _rank_ends(watch, alive_at_stop, log_path)
    dead = _first_dead(lost)
    finished = all(watch.finished(r) for r in watch.local)
    ok = dead is None and rc == 0 and finished and (dist.machine_rank != 0 or (ranks / "report.json").is_file())
    why = None
    if not ok:
        why = _why(dead, rc, log_path)
    return {
        "attempt": attempt,
        "ok": ok,
        "launcher_exit": rc,
        "dead_rank": dead.rank if dead else None,
        "pids": watch.pids,
        "lost_ranks": [e.model_dump() for e in lost],
        "seconds": round(time.monotonic() - t0, 2),
        "log": str(log_path),
        "why": why,
        "command": spec.shell(dist.machine_rank),
    }


def _start(spec: LaunchSpec, machine_rank: int, log_fh) -> subprocess.Popen:
    cmd = list(spec.commands[machine_rank])
    local = Path(sys.executable).parent / cmd[0]
    if local.is_file():  # the launcher of this interpreter's venv, not whatever is first on PATH
        cmd[0] = str(local)
    env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", _SHIM, str(os.getpid()), *cmd],
        env=env,
        stdout=log_fh,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )


class RankEnd(BaseModel):
    """How one local rank of a launch ended without its record, as far as this machine can tell."""

    rank: int
    pid: int | None = None
    dead_at: float | None = Field(default=None, description="wall time the supervisor first saw it dead")
    stopped: bool = Field(
        default=False,
        description="alive when the launcher's agent or the supervisor began stopping the launch: not what ended it",
    )
    error: str | None = Field(
        default=None,
        description="the exception it recorded as it died; None: it died without raising (a signal, a crash)",
    )
    error_at: float | None = None
    launcher_exit: int | None = Field(
        default=None, description="its exit code in the launcher's failure summary (negative: the signal)"
    )


class _Watch:
    """The local ranks' processes as the supervisor sees them, and when each was first seen dead."""

    def __init__(self, ranks: Path, local: list[int]):
        self.ranks, self.local = ranks, local
        self.pids: dict[int, int] = {}
        self.procs: dict[int, psutil.Process | None] = {}
        self.dead_at: dict[int, float] = {}

    def finished(self, rank: int) -> bool:
        return (self.ranks / f"rank{rank}.json").is_file()

    def look(self) -> list[int]:
        """The ranks dead without their record, as of now; the first sighting of each is noted."""
        for rank, pid in _pids(self.ranks, self.local).items():
            if rank not in self.procs:
                self.pids[rank] = pid
                try:
                    self.procs[rank] = psutil.Process(pid)
                except psutil.NoSuchProcess:
                    self.procs[rank] = None
            if rank not in self.dead_at and not _alive(self.procs[rank]):
                self.dead_at[rank] = time.time()
        return [r for r in self.dead_at if not self.finished(r)]

    def alive(self) -> set[int]:
        return {r for r, p in self.procs.items() if _alive(p)}

    def processes(self) -> list[psutil.Process]:
        return [p for p in self.procs.values() if p is not None]


def _supervise(proc: subprocess.Popen, watch: _Watch) -> set[int]:
    """Wait for the launch to end. A local rank dead without its record ends it: the launcher's agent
    has STOP_GRACE_S to notice and stop the rest (its report names each rank's exit code), then what is
    left is stopped here. Ranks are looked at every POLL_S throughout, so the order of deaths is seen.
    Returns the ranks still alive when this supervisor began stopping the launch."""
    while proc.poll() is None and not watch.look():
        time.sleep(POLL_S)
    deadline = time.monotonic() + STOP_GRACE_S
    while proc.poll() is None and time.monotonic() < deadline:
        time.sleep(POLL_S)
        watch.look()
    watch.look()
    alive = watch.alive()
    _stop_all(proc, watch.processes())  # the rest of a failed launch, or stragglers of one that ended
    return alive


def _rank_ends(watch: _Watch, alive_at_stop: set[int], log_path: Path) -> list[RankEnd]:
    """What is known of each local rank that ended without its record: when it was seen dead, the
    exception it recorded (launch_worker writes ``rank<R>.error.json``), and the launcher's words."""
    text = _log_tail(log_path)
    codes = {int(pid): int(code) for code, pid in _EXIT_RE.findall(text)}
    signalled = {int(pid) for pid in _CLOSING_RE.findall(text)}  # the agent's own stop, sent to live ranks
    ends = []
    for rank in watch.look():
        pid = watch.pids.get(rank)
        end = RankEnd(
            rank=rank,
            pid=pid,
            dead_at=watch.dead_at.get(rank),
            launcher_exit=codes.get(pid) if pid is not None else None,
            stopped=rank in alive_at_stop or pid in signalled,
        )
        try:
            err = json.loads((watch.ranks / f"rank{rank}.error.json").read_text())
            end = end.model_copy(update={"error": str(err.get("error"))[:500], "error_at": err.get("time")})
        except (OSError, ValueError):
            pass
        ends.append(end)
    return ends


def _first_dead(ends: list[RankEnd]) -> RankEnd | None:
    """The rank whose death ended the launch. Its peers die of it (gloo: connection reset) or are
    stopped by the agent, so: not a rank that was stopped while alive; then one that died without
    raising (killed by a signal, out of memory, a crash) over one that raised; then the earliest."""
    if not ends:
        return None
    return min(
        ends,
        key=lambda e: (
            e.stopped,
            e.error is not None,
            (e.error_at if e.error is not None else e.dead_at) or float("inf"),
            e.rank,
        ),
    )


def _why(dead: RankEnd | None, rc: int | None, log_path: Path) -> str:
    if dead is None:
        return f"the launcher exited {rc} before every rank finished" + _exit_note(log_path)
    who = f"rank {dead.rank} (pid {dead.pid}) died before it finished"
    if dead.launcher_exit is not None:
        return who + f"; the launcher saw exit code {dead.launcher_exit}{_signal_name(dead.launcher_exit)}"
    if dead.error is not None:
        return who + f"; it raised {dead.error[:300]}"
    return who + _exit_note(log_path)


def _alive(p) -> bool:
    if p is None:
        return False
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _stop_all(proc: subprocess.Popen, ranks: list) -> None:
    """SIGTERM the launcher's whole tree (ranks run in sessions of their own), SIGKILL what is left
    after a grace period, and reap the launcher."""
    tree = list(ranks)
    try:
        tree += psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        pass
    tree = [p for p in {p.pid: p for p in tree}.values() if _alive(p)]
    if proc.poll() is None:
        tree.append(psutil.Process(proc.pid))
    for p in tree:
        try:
            p.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, left = psutil.wait_procs(tree, timeout=STOP_GRACE_S)
    for p in left:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(left, timeout=STOP_GRACE_S)
    proc.wait()


def _pids(ranks: Path, local: list[int]) -> dict[int, int]:
    out = {}
    for rank in local:
        try:
            out[rank] = int((ranks / f"rank{rank}.pid").read_text())
        except (OSError, ValueError):
            pass
    return out


def _log_tail(log_path: Path) -> str:
    try:
        return log_path.read_text(errors="replace")[-40000:]
    except OSError:
        return ""


def _signal_name(code: int) -> str:
    return f" ({signal.Signals(-code).name})" if code < 0 and -code in signal.valid_signals() else ""


def _exit_note(log_path: Path) -> str:
    """The launcher's own words on the failure (torch elastic's summary), if it wrote any."""
    text = _log_tail(log_path)
    m = re.search(r"exitcode\s*:\s*(-?\d+)", text)
    if m:
        code = int(m.group(1))
        return f"; the launcher saw exit code {code}{_signal_name(code)}"
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return f"; last output: {lines[-1][:300]}" if lines else ""
