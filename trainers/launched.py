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

from trainteam.core.errors import TrainteamError
from trainteam.curation.answers import AnswerSpec
from trainteam.curation.jsonl import write_jsonl
from trainteam.trainers import budget
from trainteam.trainers.config import DistributedSpec, ModelSpec, TrainConfig
from trainteam.trainers.launch import LaunchSpec, free_port, launch_commands, write_accelerate_config
from trainteam.trainers.launch_worker import WorkerJob
from trainteam.trainers.planning import detect_hardware, plan
from trainteam.trainers.results import RestartProposal, TrainReport

log = logging.getLogger("trainteam.launched")
POLL_S = 0.2
STOP_GRACE_S = 5.0

# Run by this interpreter in front of the launcher: SIGTERM the launcher when its parent dies.
_SHIM = ("import ctypes, os, signal, sys\n"
         "try:\n"
         "    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG\n"
         "except (AttributeError, OSError):\n"
         "    pass\n"
         "if os.getppid() != int(sys.argv[1]):\n"
         "    sys.exit(1)  # the parent died before the death signal was armed\n"
         "os.execvp(sys.argv[2], sys.argv[2:])\n")


class LaunchFailed(TrainteamError):
    """Every attempt of a launched stage lost a rank."""


def train_launched(method: str, config: TrainConfig, model: Any, data: Any, *, tokenizer, dist: DistributedSpec,
                   eval_data: Any = None, apply_proposal: RestartProposal | None = None,
                   answer: AnswerSpec | None = None) -> TrainReport:
    """Train like ``training.train`` but in ``dist.num_processes`` launched processes (see the module
    docstring); returns rank 0's report. ``config.output_dir`` is the stage's folder, as for ``train``."""
    out = Path(config.output_dir)
    ldir = out / "launch"
    ranks = ldir / "ranks"
    config = config.model_copy(update={"method": method, **dist.train_fields()})
    model_path = _model_folder(model, tokenizer, ldir)
    job = WorkerJob(method=method, config=config, model=ModelSpec(path=model_path), tokenizer=_tokenizer_folder(tokenizer, ldir),
                    data=_data_file(data, ldir / "data.jsonl"), results_dir=ranks, model_path=model_path,
                    eval_data=_data_file(eval_data, ldir / "eval.jsonl") if eval_data is not None else None,
                    apply_proposal=apply_proposal, answer=answer)
    failures: list[dict] = []
    for attempt in range(1, dist.max_restarts + 2):
        c = budget.current()  # what the run may still spend, as each launch starts
        job_file = job.model_copy(update={"budget_left_s": c.left_s() if c is not None else None,
                                          "budget_allowed_s": c.allowed_s if c is not None else 0.0}).save(ldir / "job.json")
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
    raise LaunchFailed(f"distributed {method}: {failures[-1]['why']} (attempt {len(failures)} of "
                       f"{dist.max_restarts + 1}; log {failures[-1]['log']})")


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
        cfg_file = write_accelerate_config(p, ldir, main_process_ip=dist.main_process_ip if dist.num_machines > 1 else None,
                                           main_process_port=port)
    return launch_commands(p, "trainteam.trainers.launch_worker", [str(job_file)], launcher=dist.launcher,
                           module=True, config_file=cfg_file, main_process_ip=ip, main_process_port=port)


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
    local = [dist.machine_rank * per_node + i for i in range(per_node)]
    log_path = ldir / f"attempt{attempt}.log"
    t0 = time.monotonic()
    with open(log_path, "w") as log_fh:
        proc = _start(spec, dist.machine_rank, log_fh)
        dead = _supervise(proc, ranks, local)
    rc = proc.returncode
    seen = _pids(ranks, local)
    finished = all((ranks / f"rank{r}.json").is_file() for r in local)
    ok = dead is None and rc == 0 and finished and (dist.machine_rank != 0 or (ranks / "report.json").is_file())
    why = None
    if not ok:
        who = f"rank {dead} (pid {seen.get(dead)}) died before it finished" if dead is not None else \
            f"the launcher exited {rc} before every rank finished"
        why = who + _exit_note(log_path)
    return {"attempt": attempt, "ok": ok, "launcher_exit": rc, "dead_rank": dead, "pids": seen,
            "seconds": round(time.monotonic() - t0, 2), "log": str(log_path), "why": why,
            "command": spec.shell(dist.machine_rank)}


def _start(spec: LaunchSpec, machine_rank: int, log_fh) -> subprocess.Popen:
    cmd = list(spec.commands[machine_rank])
    local = Path(sys.executable).parent / cmd[0]
    if local.is_file():  # the launcher of this interpreter's venv, not whatever is first on PATH
        cmd[0] = str(local)
    env = {**os.environ, **spec.env, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-c", _SHIM, str(os.getpid()), *cmd], env=env, stdout=log_fh,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)


def _supervise(proc: subprocess.Popen, ranks: Path, local: list[int]) -> int | None:
    """Wait for the launch; the first local rank found dead without its record stops it all
    (returned). None: the launcher ended by itself."""
    known: dict[int, psutil.Process] = {}
    while proc.poll() is None:
        for rank, pid in _pids(ranks, local).items():
            if rank not in known:
                try:
                    known[rank] = psutil.Process(pid)
                except psutil.NoSuchProcess:
                    known[rank] = None  # type: ignore[assignment]
            if not _alive(known[rank]) and not (ranks / f"rank{rank}.json").is_file():
                time.sleep(POLL_S)  # its record may be on its way
                if not (ranks / f"rank{rank}.json").is_file():
                    try:  # the launcher's own agent notices too: it stops the others and says how the rank died
                        proc.wait(timeout=STOP_GRACE_S)
                    except subprocess.TimeoutExpired:
                        pass
                    _stop_all(proc, [p for p in known.values() if p is not None])
                    return rank
        time.sleep(POLL_S)
    _stop_all(proc, [p for p in known.values() if p is not None])  # stragglers of a launcher that ended
    return None


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


def _exit_note(log_path: Path) -> str:
    """The launcher's own words on the failure (torch elastic's summary), if it wrote any."""
    try:
        text = log_path.read_text(errors="replace")[-20000:]
    except OSError:
        return ""
    m = re.search(r"exitcode\s*:\s*(-?\d+)", text)
    if m:
        code = int(m.group(1))
        name = f" ({signal.Signals(-code).name})" if code < 0 and -code in signal.valid_signals() else ""
        return f"; the launcher saw exit code {code}{name}"
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return f"; last output: {lines[-1][:300]}" if lines else ""
