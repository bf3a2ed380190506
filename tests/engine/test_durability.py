"""Durability through the real CLI: kill -9 anywhere in a run, and one decision raced by ten processes.

1. The kill sweep. ONE small ``train_model`` run (pretrain → LoRA SFT → adapter merge →
   final eval → registration, which waits for a person) is killed with SIGKILL at ten
   points in turn: curate, train_tokenizer, mid-pretrain, mid-SFT, evaluate, gate,
   merge_adapters, final_eval, while waiting for the register_model approval, and inside
   register_model. A new ``trainteam runs resume`` process takes the run to the next point
   and is killed there; a last ``runs resume --yes`` runs it to completion. One run killed
   at every point was chosen over ten separate runs: ten runs would train ten models and pay
   every step's process start ten times (several minutes on a 2-core machine); one run pays
   one process start per point. The finished run is compared with an uninterrupted reference
   run of the same task (run meanwhile, in its own workspace): the same steps ending the
   same way, every step finished once (a step cut short ran again, once per kill), the same
   DBOS step records, as many graph nodes of every kind, each stage trained once to its
   length, and one registered model.

   Placing a kill inside a step: the run's process group is advanced in slices (SIGCONT,
   10 ms — 2 ms or less while the target step runs —, SIGSTOP, wait until every thread has
   stopped) and, while it is frozen, the workspace database (``step_attempts``, ``approvals``,
   the graph, the registry) and the checkpoint folders are read. The kill lands once the
   step's latest attempt is recorded as started and not finished AND its work is recorded:
   an output ``produced_by`` its Step node in the graph (the curated DatasetVersion for
   curate), or, mid-training, a complete checkpoint of the stage and no final weights. That
   is where a re-run would duplicate something if it were not idempotent. The frozen group
   then gets SIGKILL, and the database is read again once it is dead (a commit in flight at
   the kill becomes visible then): the attempt must still be the same one, started and not
   finished, and the run shown as interrupted (or still waiting for the decision). Nothing
   in the product is a test hook.

2. Ten processes decide one pending approval at once (on SQLite and on a real PostgreSQL server)
   (five approve, five reject; a file barrier releases them after each has imported the CLI):
   exactly one wins, nine fail with
   one line on stderr and no traceback, the graph holds the winner's decision only, and the
   run completes or stops as the winner decided.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from spine_helpers import DATA, _env, cli, pending_approvals, run_view, spawn, wait_for, write_task

RUN = "dur"
PRETRAIN_STEPS, SFT_STEPS = 60, 40
TRAINING = {
    "pretrain": {"max_steps": PRETRAIN_STEPS, "per_device_batch_size": 8, "seq_len": 32, "save_steps": 5},
    "sft": {"max_steps": SFT_STEPS, "per_device_batch_size": 8, "seq_len": 32, "save_steps": 5, "lora": {"r": 4}},
}
GATES = {"pretrain": {"metric": "heldout_loss", "max": 50.0}, "sft": {"metric": "heldout_loss", "max": 50.0}}
SLICE_S = 0.01  # how long the run's process runs between two looks at its state


# --------------------------------------------------------------------------- processes
class Proc:
    """A CLI process in its own process group, its output in files (never a full pipe)."""

    def __init__(self, ws: Path, logs: Path, label: str, *args: str):
        logs.mkdir(parents=True, exist_ok=True)
        self.label = label
        self.out_path, self.err_path = logs / f"{label}.out", logs / f"{label}.err"
        with open(self.out_path, "w") as out, open(self.err_path, "w") as err:
            self.popen = subprocess.Popen(
                [sys.executable, "-m", "trainteam.cli", "-w", str(ws), *args],
                stdout=out,
                stderr=err,
                env=_env(),
                start_new_session=True,
            )
        self.pid = self.popen.pid

    def stderr_tail(self, n: int = 3000) -> str:
        try:
            return self.err_path.read_text()[-n:]
        except OSError:
            return ""

    def signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        self.signal_group(signal.SIGKILL)
        try:
            self.popen.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass


def _group_pids(pgid: int) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getpgid(int(entry)) == pgid:
                    pids.append(int(entry))
            except (ProcessLookupError, PermissionError):
                continue
    return pids


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _running_threads(pgid: int) -> list[str]:
    """The threads of the group's processes that are not stopped (nor gone): ``pid/tid comm state``."""
    out = []
    for pid in _group_pids(pgid):
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:
            continue
        for tid in tids:
            try:
                stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
            except (FileNotFoundError, ProcessLookupError):
                continue
            comm, rest = stat.split("(", 1)[1].rsplit(")", 1)
            state = rest.split()[0]
            if state in ("T", "t", "Z", "X"):
                continue
            wchan = _read(f"/proc/{pid}/task/{tid}/wchan")
            if state == "D" and ("clone" in wchan or "vfork" in wchan):
                continue  # a parent in vfork waits for its child, which is stopped in the group
            out.append(f"{pid}/{tid} {comm} {state} {wchan}")
    return out


def freeze(proc: Proc) -> None:
    """SIGSTOP the group and wait until every thread has stopped (sent again for a process
    forked after the first signal)."""
    deadline = time.monotonic() + 10
    while True:
        proc.signal_group(signal.SIGSTOP)
        running = _running_threads(proc.pid)
        if not running:
            return
        assert time.monotonic() < deadline, f"{proc.label}: not stopped by SIGSTOP: {running}"
        time.sleep(0.0005)


class Missed(AssertionError):
    """The step ran past the point between two looks."""


def freeze_at(proc: Proc, point, ws: Path, timeout: float):
    """Run ``proc`` in slices until ``point.inside(ws)`` (read while it is frozen) holds;
    the process group is left frozen and the value returned."""
    deadline = time.monotonic() + timeout
    was_near = False
    while True:
        freeze(proc)
        try:
            value = point.inside(ws)
            if value:
                return value
            near = point.near(ws)
        except Unreadable:  # look again after the next slice
            value, near = None, was_near
        if was_near and not near:
            proc.kill()
            raise Missed(
                f"{proc.label}: step {point.step} finished before {point.label} was seen "
                f"(slices too coarse?): {attempts(ws, RUN)[-3:]}\n{proc.stderr_tail()}"
            )
        was_near = near
        if proc.popen.poll() is not None:
            raise AssertionError(
                f"{proc.label} exited {proc.popen.returncode} before {point.label}:\n{proc.stderr_tail()}"
            )
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{proc.label}: {point.label} not reached in {timeout}s:\n{proc.stderr_tail()}")
        proc.signal_group(signal.SIGCONT)
        time.sleep(point.fine_s if near else SLICE_S)


# ------------------------------------------------------------------ reading the workspace
class Unreadable(Exception):
    """The workspace database could not be read this time (not created yet, or busy)."""


def _query(ws: Path, sql: str, params: tuple = ()) -> list[tuple]:
    """A read of the workspace database that never waits long and never creates it. A
    read-write connection, like the CLI's: after a kill -9 the first connection rebuilds the
    WAL index, which a ``mode=ro`` one may not do."""
    db = ws / "trainteam.db"
    if not db.exists():
        raise Unreadable(f"{db} does not exist yet")
    try:
        conn = sqlite3.connect(db, timeout=0.2)
    except sqlite3.OperationalError as exc:
        raise Unreadable(str(exc)) from None
    try:
        return conn.execute(sql, params).fetchall()
    except sqlite3.OperationalError as exc:  # tables not created yet, or a writer's lock
        raise Unreadable(str(exc)) from None
    finally:
        conn.close()


def attempts(ws: Path, run_id: str) -> list[dict]:
    rows = _query(
        ws, "SELECT id, step, visit, status, finished_at FROM step_attempts WHERE run_id = ? ORDER BY id", (run_id,)
    )
    return [dict(zip(("id", "step", "visit", "status", "finished_at"), r, strict=True)) for r in rows]


def approvals(ws: Path, run_id: str) -> list[dict]:
    rows = _query(
        ws, "SELECT id, step, action, status, decided_by FROM approvals WHERE run_id = ? ORDER BY created_at", (run_id,)
    )
    return [dict(zip(("id", "step", "action", "status", "decided_by"), r, strict=True)) for r in rows]


def run_status(ws: Path, run_id: str) -> str | None:
    rows = _query(ws, "SELECT status FROM runs WHERE run_id = ?", (run_id,))
    return rows[0][0] if rows else None


def open_attempt(ws: Path, run_id: str, step: str) -> dict | None:
    """The step's latest attempt if it is recorded as started and not finished."""
    mine = [a for a in attempts(ws, run_id) if a["step"] == step]
    if mine and mine[-1]["status"] == "running" and mine[-1]["finished_at"] is None:
        return mine[-1]
    return None


def _stage_dir(ws: Path, stage: str) -> Path:
    return ws / "checkpoints" / RUN / f"{stage}-v1"


def mid_stage(ws: Path, stage: str) -> bool:
    """A stage of the train step has saved a complete checkpoint (its trainer state and
    weights written) and not yet its final weights."""
    folder = _stage_dir(ws, stage)
    if not folder.is_dir() or (folder / "final").exists():
        return False
    return any(p.name.startswith("checkpoint-") and _complete(p) for p in folder.iterdir())


def _complete(checkpoint: Path) -> bool:
    try:
        json.loads((checkpoint / "trainer_state.json").read_text())
    except (OSError, ValueError):
        return False
    return any(checkpoint.glob("*.safetensors"))


def graph_kinds(ws: Path) -> Counter:
    nodes = json.loads(cli(ws, "graph", "nodes", "--json", check=True).stdout)
    return Counter(n["kind"] for n in nodes)


def dbos_step_records(ws: Path, run_id: str) -> list[str]:
    """DBOS's records of the run's steps (``train#1``, ``register_model#1.decided1``), not the
    approval, budget or status bookkeeping around them."""
    from dbos import DBOSClient

    client = DBOSClient(system_database_url=f"sqlite:///{ws / 'dbos.sqlite'}")
    try:
        names = [s["function_name"] for s in client.list_workflow_steps(run_id)]
    finally:
        client.destroy()
    return [n for n in names if "#" in n and ":" not in n]


# --------------------------------------------------------------------------- the sweep
def _step_node(step: str) -> str:
    return f"Step:{RUN}/{step}#1"


def produced(ws: Path, step: str) -> bool:
    """The step has recorded an output in the graph (a node ``produced_by`` its Step)."""
    return bool(
        _query(ws, "SELECT 1 FROM graph_edges WHERE dst = ? AND kind = 'produced_by' LIMIT 1", (_step_node(step),))
    )


def curated(ws: Path) -> bool:
    """Curation has recorded its dataset: a DatasetVersion derived from the prepared one."""
    return bool(
        _query(
            ws,
            "SELECT 1 FROM graph_edges e JOIN graph_nodes n ON n.id = e.dst "
            "WHERE e.src LIKE 'DatasetVersion:%' AND e.kind = 'derived_from' "
            "AND n.kind = 'DatasetVersion' LIMIT 1",
        )
    )


def registered(ws: Path) -> bool:
    return bool(_query(ws, "SELECT 1 FROM registry_models LIMIT 1"))


def _approval(ws: Path, status: str) -> list[dict]:
    return [a for a in approvals(ws, RUN) if a["step"] == "register_model" and a["status"] == status]


class Point:
    """Where a kill lands: inside ``step`` (its attempt started and not finished) once
    ``done(ws)`` holds; ``step`` None: between steps, when ``done(ws)`` holds."""

    def __init__(self, label: str, step: str | None, done, *, fine_s: float = 0.002, yes: bool = False):
        self.label, self.step, self.done, self.fine_s, self.yes = label, step, done, fine_s, yes

    def inside(self, ws: Path):
        if self.step is None:
            return self.done(ws)
        attempt = open_attempt(ws, RUN, self.step)
        return attempt if attempt and self.done(ws) else None

    def near(self, ws: Path) -> bool:
        """The step runs: look at it in finer slices, so a short window is not stepped over."""
        return self.step is not None and open_attempt(ws, RUN, self.step) is not None


def _waiting_for_approval(ws: Path) -> bool:
    return (
        bool(_approval(ws, "pending"))
        and run_status(ws, RUN) == "waiting_approval"
        and open_attempt(ws, RUN, "register_model") is None
    )


# In run order. Each kill but the mid-training ones lands after the step's work is recorded
# (its output in the graph, the model in the registry) and before the step is recorded as
# finished: where a re-run would make duplicates if anything were not idempotent.
POINTS = [
    Point("curate", "curate", curated),
    Point("train_tokenizer", "train_tokenizer", lambda ws: produced(ws, "train_tokenizer")),
    Point("mid-pretrain", "train", lambda ws: mid_stage(ws, "pretrain"), fine_s=SLICE_S),
    Point("mid-SFT", "train", lambda ws: mid_stage(ws, "sft"), fine_s=SLICE_S),
    Point("evaluate", "evaluate", lambda ws: produced(ws, "evaluate")),
    Point("gate", "gate", lambda ws: produced(ws, "gate")),
    Point("merge_adapters", "merge_adapters", lambda ws: produced(ws, "merge_adapters")),
    Point("final_eval", "final_eval", lambda ws: produced(ws, "final_eval")),
    Point("waiting for the register_model approval", None, _waiting_for_approval),
    # after the Model node is recorded. (A kill in the ~0.1 ms between the registry row and
    # its Model node is not recovered from as this is written: the re-run finds the row and
    # records no lineage, and resuming fails with UnknownNode.)
    Point("register_model", "register_model", lambda ws: produced(ws, "register_model"), fine_s=0.0005, yes=True),
]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """The run killed at every point of POINTS in turn, resumed to completion, and the
    uninterrupted reference run of the same task (run meanwhile, in its own workspace)."""
    tmp = tmp_path_factory.mktemp("sweep")
    ws, ref_ws, logs = tmp / "ws", tmp / "ref", tmp / "logs"
    task = write_task(tmp, stages=["pretrain", "sft"], training=TRAINING, gates=GATES)
    started: list[Proc] = []
    try:
        reference = Proc(
            ref_ws,
            logs,
            "reference",
            "execute-workflow",
            "train_model",
            "--task",
            str(task),
            "--run-id",
            RUN,
            "-q",
            "--yes",
        )
        started.append(reference)
        kills = []
        for i, point in enumerate(POINTS):
            args = (
                (
                    ["execute-workflow", "train_model", "--task", str(task), "--run-id", RUN]
                    if i == 0
                    else ["runs", "resume", RUN]
                )
                + ["-q"]
                + (["--yes"] if point.yes else [])
            )
            proc = Proc(ws, logs, f"{i:02d}-{point.label.split()[0]}", *args)
            started.append(proc)
            seen = freeze_at(proc, point, ws, timeout=600)
            proc.kill()
            assert proc.popen.returncode == -signal.SIGKILL, f"{point.label}: exit {proc.popen.returncode}"
            # read again once the process is gone: the kill landed inside the step (its attempt
            # is recorded as started and never finished) after its work was recorded
            after = point.inside(ws)
            assert after and (point.step is None or after["id"] == seen["id"]), (
                f"kill at {point.label}: not inside any more (seen {seen}): {_state(ws)}"
            )
            # what a person sees: cut short inside a step, or still waiting for the decision
            view = run_view(ws, RUN)
            shown = "interrupted" if point.step is not None else "waiting_approval"
            assert (view["status"], view["process_alive"]) == (shown, False), (
                point.label,
                view["status"],
                view["error"],
            )
            kills.append((point.label, point.step))

        final = Proc(ws, logs, "final-resume", "runs", "resume", RUN, "-q", "--yes")
        started.append(final)
        assert final.popen.wait(timeout=600) == 0, final.stderr_tail()
        assert reference.popen.wait(timeout=600) == 0, reference.stderr_tail()
    finally:
        for p in started:
            if p.popen.poll() is None:
                p.kill()
    return {"ws": ws, "ref_ws": ref_ws, "kills": kills}


def test_kill_9_at_ten_points_then_resume_completes_like_an_uninterrupted_run(sweep):
    ws, ref_ws, kills = sweep["ws"], sweep["ref_ws"], sweep["kills"]
    assert len(kills) == len(POINTS) >= 8
    view, ref_view = run_view(ws, RUN), run_view(ref_ws, RUN)
    assert view["status"] == "completed" == ref_view["status"], (view["error"], ref_view["error"])
    # the same steps, ending the same way
    assert [(s["name"], s["visit"], s["status"]) for s in view["steps"]] == [
        (s["name"], s["visit"], s["status"]) for s in ref_view["steps"]
    ]
    # a step finished before a kill never ran again; a step cut short ran again from its start, once per kill
    cut_short = Counter(step for _, step in kills if step is not None)
    assert set(cut_short) <= {s["name"] for s in view["steps"]}
    for (name, _visit), statuses in _statuses_by_step(ws).items():
        finished = [s for s in statuses if s not in ("interrupted", "needs_approval")]
        assert len(finished) == 1 and finished[0] in ("completed", "skipped"), (name, statuses)
        assert statuses.count("interrupted") == cut_short[name], (name, statuses, kills)
    # the registration was asked once and decided once, by the person resuming with --yes
    assert [(a["action"], a["status"]) for a in view["approvals"]] == [("register_model", "approved")]
    assert view["approvals"][0]["decided_by"].endswith("(--yes)")

    # each stage trained to its length once: SFT continued from the checkpoint it had saved before
    # the kill, and pretrain, finished before that kill, was not trained again (not even a step)
    assert view["metrics"]["train.sft.steps"] == SFT_STEPS == ref_view["metrics"]["train.sft.steps"]
    assert view["metrics"]["train.sft.steps_this_attempt"] < SFT_STEPS, view["metrics"]
    assert view["metrics"]["train.pretrain.steps"] == PRETRAIN_STEPS, view["metrics"]
    pretrain = sorted(p.name for p in _stage_dir(ws, "pretrain").iterdir() if p.name.startswith("checkpoint-"))
    assert f"checkpoint-{PRETRAIN_STEPS + 1}" not in pretrain, pretrain

    # DBOS recorded every step once, the same steps as for the uninterrupted run
    steps = dbos_step_records(ws, RUN)
    assert len(steps) == len(set(steps)), Counter(steps).most_common(3)
    assert sorted(steps) == sorted(dbos_step_records(ref_ws, RUN)), steps

    # no graph node twice: as many of every kind as the uninterrupted run made
    kinds, ref_kinds = graph_kinds(ws), graph_kinds(ref_ws)
    assert kinds == ref_kinds, f"resumed run: {dict(kinds)}; uninterrupted: {dict(ref_kinds)}"
    assert kinds["Model"] == 1 and kinds["Checkpoint"] == 3  # pretrain, the SFT adapter, the merged weights
    assert kinds["Step"] == len(view["steps"])

    # one registered model: the merged full weights
    models = json.loads(cli(ws, "models", "list", "--json", check=True).stdout)
    assert [(m["name"], m["stage"]) for m in models] == [("tiny", "sft")], models
    merged = ws / "checkpoints" / RUN / "merged-v1"
    assert Path(models[0]["path"]) == merged.resolve()
    assert any(merged.glob("*.safetensors")) and not (merged / "adapter_config.json").exists()


def _state(ws: Path) -> dict:
    """What the workspace says, for assertion messages."""
    return {
        "attempts": attempts(ws, RUN)[-3:],
        "approvals": approvals(ws, RUN),
        "run": run_status(ws, RUN),
        "registered": registered(ws),
        "model_nodes": _model_nodes(ws),
    }


def _model_nodes(ws: Path) -> list[str]:
    return [r[0] for r in _query(ws, "SELECT id FROM graph_nodes WHERE kind = 'Model'")]


def _statuses_by_step(ws: Path) -> dict[tuple[str, int], list[str]]:
    out: dict[tuple[str, int], list[str]] = {}
    for a in attempts(ws, RUN):
        out.setdefault((a["step"], a["visit"]), []).append(a["status"])
    return out


# ------------------------------------------------------------- racing decisions
RACER = r"""
import os, sys, time
from pathlib import Path
import trainteam.cli, trainteam.commands.approvals, trainteam.workflows.engine.approvals, trainteam.workspace
import dbos, sqlalchemy
ready, go, argv = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
ready.write_text(str(os.getpid()))
while not go.exists():
    time.sleep(0.001)
trainteam.cli.main(argv)
"""


def test_ten_processes_decide_one_approval_and_exactly_one_wins(tmp_path, ws, background, database):
    task = write_task(tmp_path, workflow="prep_only", require_approval=["prepare_corpus"])
    run = spawn(ws, "execute-workflow", str(DATA / "prep_only.yaml"), "--task", str(task), "--run-id", "race")
    background.append(run)
    pending = wait_for(lambda: pending_approvals(ws), timeout=600, what="a pending approval")
    approval_id = pending[0]["id"]
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    go = barrier / "go"
    racers = []
    for i in range(10):  # five approve, five reject
        verb = "approve" if i % 2 == 0 else "reject"
        argv = ["-w", str(ws), "approvals", verb, approval_id, "--by", f"p{i}", "--note", f"from p{i}"]
        racer = subprocess.Popen(
            [sys.executable, "-c", RACER, str(barrier / f"ready{i}"), str(go), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
        )
        background.append(racer)
        racers.append((f"p{i}", verb, racer))
    wait_for(
        lambda: (
            all((barrier / f"ready{i}").exists() for i in range(10)) or any(p.poll() is not None for _, _, p in racers)
        ),
        timeout=600,
        what="ten racers ready",
    )
    go.touch()
    results = []
    for who, verb, p in racers:
        out, err = p.communicate(timeout=600)
        results.append((who, verb, p.returncode, out, err))

    winners = [r for r in results if r[2] == 0]
    assert len(winners) == 1, [(w, v, rc, err[-500:]) for w, v, rc, _, err in results]
    who, verb, _, out, _ = winners[0]
    status = "approved" if verb == "approve" else "rejected"
    assert f"{status} by {who}" in out, out
    for loser, _, rc, _, err in results:
        if loser == who:
            continue
        assert rc == 2, (loser, rc, err)
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1, (loser, err)
        assert err.startswith("error: ") and f"already {status} by {who}" in err, (loser, err)

    # the queue and the graph hold the winner's decision only
    row = next(a for a in run_view(ws, "race")["approvals"] if a["id"] == approval_id)  # SQLite or Postgres
    assert (row["status"], row["decided_by"]) == (status, who)
    people = json.loads(cli(ws, "graph", "nodes", "--kind", "Person", "--json", check=True).stdout)
    assert [p["id"] for p in people] == [f"Person:{who}"], people
    decisions = [
        d
        for d in json.loads(cli(ws, "graph", "nodes", "--kind", "Decision", "--json", check=True).stdout)
        if d["id"] == f"Decision:approval/{approval_id}"
    ]
    assert [(d.get("by"), d.get("status")) for d in decisions] == [(who, status)], decisions

    # the run goes on, or stops, as the winner decided
    rc = run.wait(timeout=600)
    view = run_view(ws, "race")
    if status == "approved":
        assert rc == 0 and view["status"] == "completed", (rc, view["status"], view["error"], run.stderr.read()[-2000:])
        assert [(s["name"], s["attempts"]) for s in view["steps"]] == [("prepare_corpus", 1)]
    else:
        assert rc == 1 and view["status"] == "failed", (rc, view["status"], view["error"])
        assert f"rejected by {who}" in view["error"] and f"from {who}" in view["error"], view["error"]
        assert view["steps"] == []
