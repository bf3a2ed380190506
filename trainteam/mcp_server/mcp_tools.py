"""The tools ``trainteam mcp`` serves: typed arguments in, JSON-ready dicts out.

- curation (``curate_corpus``, ``dedup_corpus``, ``decontaminate_corpus``): the data engine with
  its version recorded in the knowledge graph, as ``trainteam curate run`` does;
- training (``execute_workflow``): a run started through the CLI's own path (``trainteam
  execute-workflow`` in a process of its own), so the task's budget, the personas' gated tools and
  ``require_approval`` hold as for any run; the call returns the run's id and status once it ends,
  waits for a person, or ``wait_seconds`` pass — it never waits on an approval;
- one tool per training method (``train_tools.py``) and per artifact (``artifact_tools.py``:
  tokenizer, adapter merge, training dataset, reward check, dataset lineage);
- reading (``list_runs``, ``show_run``, ``list_approvals``, ``show_approval``, ``lineage``,
  ``graph_nodes``): read-only views.

Plan-first: a curation or training call without ``execute: true`` returns its plan and stores
nothing. The arguments reuse the corridor's ``PlanFirstArgs`` (``execute``, ``reason``), the data
engine's configs and the training engineer's ``StageOverrides``. No tool decides an approval or
raises a budget: those are a person's (``trainteam approvals``).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from trainteam.contract.stage_config import StageOverrides, with_overrides
from trainteam.contract.step_io import PlanFirstArgs
from trainteam.contract.train_task import TrainTask, load_task_file, parse_task
from trainteam.core.errors import BadInput, NotFound
from trainteam.curation.decontam import DecontamConfig
from trainteam.curation.dedup import NearDupConfig
from trainteam.curation.pipeline import CurationConfig, planned_version
from trainteam.graph import NodeKind
from trainteam.graph.knowledge import UnknownNode
from trainteam.workflows.engine.approval_ids import resolve, short_id
from trainteam.workflows.engine.spec import builtin_names, load_builtin
from trainteam.workflows.engine.store import ApprovalStore, RunStore
from trainteam.workflows.report.evidence import approval_evidence_view
from trainteam.workflows.report.views import run_public, runs_public
from trainteam.workflows.runs.runner import check_new_run_id, new_run_id
from trainteam.workflows.steps.curate import curate_recorded
from trainteam.workflows.task.curriculum import curriculum_from_task
from trainteam.workflows.task.preflight import check_runnable
from trainteam.workflows.task.stage_plan import plan_stage

SETTLED = ("completed", "failed", "cancelled", "waiting_approval")
MAX_WAIT_S = 600.0


# ------------------------------------------------------------------ arguments


class CurateCorpusArgs(PlanFirstArgs):
    """Curate a corpus: exact and near dedup, decontamination against eval sets, quality filters."""

    corpus: str = Field(description=".jsonl / .txt / .parquet file, a folder of them, or a saved HF dataset")
    eval_sets: dict[str, str] = Field(
        default_factory=dict, description="name -> path of an eval set to decontaminate against"
    )
    config: CurationConfig = Field(default_factory=CurationConfig, description="every stage; null skips one")
    out: str | None = Field(None, description="output folder (default: the workspace's datasets/<version>)")


class DedupCorpusArgs(PlanFirstArgs):
    """Remove exact and near duplicates from a corpus (no other filter)."""

    corpus: str = Field(description=".jsonl / .txt / .parquet file, a folder of them, or a saved HF dataset")
    text_field: str = "text"
    exact: bool = Field(True, description="drop exact duplicates")
    near: NearDupConfig | None = Field(default_factory=NearDupConfig, description="MinHash near dedup; null: none")
    out: str | None = None


class DecontaminateCorpusArgs(PlanFirstArgs):
    """Drop (or cut) corpus rows that overlap an eval set (n-gram overlap), nothing else."""

    corpus: str = Field(description=".jsonl / .txt / .parquet file, a folder of them, or a saved HF dataset")
    eval_sets: dict[str, str] = Field(min_length=1, description="name -> path of an eval set")
    text_field: str = "text"
    decontam: DecontamConfig = Field(default_factory=DecontamConfig)
    out: str | None = None


class ExecuteWorkflowArgs(PlanFirstArgs):
    """Run a bundled workflow (train_model) on a task, under the task's budget and the approval rules."""

    workflow: str = Field("train_model", description="a bundled workflow")
    task: dict[str, Any] | None = Field(None, description="the task, as a task file's YAML would hold it")
    task_path: str | None = Field(None, description="or a task file (YAML)")
    overrides: dict[str, StageOverrides] = Field(
        default_factory=dict, description="per-stage settings replacing the task's, by stage name"
    )
    run_id: str | None = Field(None, description="choose the run id (default: generated)")
    wait_seconds: float = Field(
        60.0,
        ge=0,
        le=MAX_WAIT_S,
        description="how long the call waits for the run to "
        "end or to wait for a person; it returns then with the run's status",
    )


class ListRunsArgs(BaseModel):
    """The latest runs: status, current step, metrics (read-only)."""

    model_config = ConfigDict(extra="forbid")
    limit: int = Field(20, ge=1, le=500)


class RunRef(BaseModel):
    """One run: its task, steps and approvals (read-only)."""

    model_config = ConfigDict(extra="forbid")
    run_id: str


class ListApprovalsArgs(BaseModel):
    """Approvals and the evidence each carries (read-only: a person decides them with `trainteam approvals`)."""

    model_config = ConfigDict(extra="forbid")
    status: Literal["pending", "approved", "rejected", "expired", "all"] = "pending"
    run_id: str | None = None


class ApprovalRef(BaseModel):
    """One approval and its evidence (read-only)."""

    model_config = ConfigDict(extra="forbid")
    approval_id: str = Field(description="the full id, or its short id (6+ digits)")


class NodeRef(BaseModel):
    """A knowledge-graph node's lineage: every ancestor it was derived from, trained on, produced by."""

    model_config = ConfigDict(extra="forbid")
    node: str = Field(description="a graph node id (Model:abc, DatasetVersion:...) or its unique key")


class GraphNodesArgs(BaseModel):
    """Knowledge-graph nodes, optionally of one kind (read-only)."""

    model_config = ConfigDict(extra="forbid")
    kind: str | None = Field(None, description="only this kind: Model, DatasetVersion, Checkpoint, Run, ...")
    limit: int = Field(100, ge=1, le=1000)


# ------------------------------------------------------------------ curation


def _plan(tool: str, **plan: Any) -> dict[str, Any]:
    return {"executed": False, "tool": tool, "plan": plan, "next": f"call {tool} again with execute: true to run it"}


def _corpus(path: str) -> Path:
    p = Path(path).expanduser()
    if not p.exists():
        raise BadInput(f"corpus: {path}: no such file or folder")
    return p


def _evals(sets: dict[str, str]) -> dict[str, Path]:
    for name, path in sets.items():
        if not Path(path).expanduser().exists():
            raise BadInput(f"eval_sets.{name}: {path}: no such file")
    return {name: Path(path).expanduser() for name, path in sets.items()}


def _curate(ws, tool: str, args, config: CurationConfig, evals: dict[str, Path]) -> dict[str, Any]:
    corpus = _corpus(args.corpus)
    version = planned_version(corpus, evals, config)
    out = Path(args.out) if args.out else ws.root / "datasets" / (version or "curated")
    if not args.execute:
        return _plan(
            tool,
            corpus=str(corpus),
            eval_sets={k: str(v) for k, v in evals.items()},
            version=version,
            out=str(out),
            config=config.model_dump(mode="json"),
        )
    report = curate_recorded(ws.graph, corpus, evals, config, out, progress=False)
    return {"executed": True, "tool": tool, "summary": report.summary(), "report": report.model_dump(mode="json")}


def curate_corpus(ws, args: CurateCorpusArgs) -> dict[str, Any]:
    return _curate(ws, "curate_corpus", args, args.config, _evals(args.eval_sets))


def dedup_corpus(ws, args: DedupCorpusArgs) -> dict[str, Any]:
    config = CurationConfig(
        text_field=args.text_field,
        exact_dedup=args.exact,
        near_dedup=args.near,
        quality=None,
        decontam=None,
        max_drop_fraction=None,
    )
    return _curate(ws, "dedup_corpus", args, config, {})


def decontaminate_corpus(ws, args: DecontaminateCorpusArgs) -> dict[str, Any]:
    config = CurationConfig(
        text_field=args.text_field,
        exact_dedup=False,
        near_dedup=None,
        quality=None,
        decontam=args.decontam,
        max_drop_fraction=None,
    )
    return _curate(ws, "decontaminate_corpus", args, config, _evals(args.eval_sets))


# ------------------------------------------------------------------ training


def _task(args: ExecuteWorkflowArgs) -> TrainTask:
    if args.task is not None and args.task_path is None:
        task = parse_task(args.task, "task")
    elif args.task is None and args.task_path is not None:
        task = load_task_file(Path(args.task_path))
    else:
        raise BadInput("task: give either task (the task's fields) or task_path (a task file), not both or neither")
    for stage, ov in args.overrides.items():
        if stage not in task.stage_names():
            raise BadInput(f"overrides: stage {stage!r} is not in the task's stages {task.stage_names()}")
        task = with_overrides(task, stage, ov)
    return task


def _training_plan(task: TrainTask, spec) -> dict[str, Any]:
    curriculum = curriculum_from_task(task)
    planned = [*curriculum.training_stages(), *filter(None, [curriculum.align_stage()])]
    stages = {
        s.name: plan_stage(task, s.name, task.train_config(s.name)).model_dump(mode="json", exclude={"stage"})
        for s in planned
    }
    return {
        "workflow": spec.name,
        "task": task.name,
        "steps": spec.describe_steps(task.stages),
        "stages": stages,
        "est_minutes": round(sum(v["est_minutes"] for v in stages.values()), 3),
        "budget": task.budget.model_dump(mode="json"),
        "require_approval": task.require_approval,
        "gated": "register_model waits for a person's approval (trainteam approvals); so does every "
        "step in require_approval and a spend over the budget",
    }


def execute_workflow(ws_root: Path, open_ws, args: ExecuteWorkflowArgs) -> dict[str, Any]:
    """Plan, or start the run as ``trainteam execute-workflow`` does and report where it stands."""
    if args.workflow not in builtin_names():
        raise BadInput(f"workflow: {args.workflow!r} is not a bundled workflow ({', '.join(builtin_names())})")
    spec = load_builtin(args.workflow)
    task = _task(args)
    check_runnable(spec, task, "task")  # everything knowable before a run exists
    plan = _training_plan(task, spec)
    if not args.execute:
        return _plan("execute_workflow", **plan)
    ws = open_ws()
    run_id = check_new_run_id(ws, args.run_id, "run_id") if args.run_id else new_run_id(task.name)
    folder = ws.dir("logs") / "mcp"
    folder.mkdir(parents=True, exist_ok=True)
    task_file = folder / f"{run_id}.task.yaml"
    task_file.write_text(yaml.safe_dump(task.model_dump(mode="json"), sort_keys=False))
    log = folder / f"{run_id}.log"
    with log.open("ab") as out:  # its own session: the run outlives this server, as a CLI run outlives its shell
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trainteam.cli",
                "-w",
                str(ws_root),
                "execute-workflow",
                spec.name,
                "--task",
                str(task_file),
                "--run-id",
                run_id,
                "-q",
            ],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
    status = _wait(ws, run_id, proc, args.wait_seconds)
    if status["status"] == "not_started":  # refused before the run existed: its one-line error
        lines = log.read_text(errors="replace").strip().splitlines()
        raise BadInput(lines[-1].removeprefix("error: ") if lines else f"the run exited {status['exit_code']}")
    return {"executed": True, "run_id": run_id, **status, "log": str(log), "plan": plan}


def _wait(ws, run_id: str, proc: subprocess.Popen, wait_s: float) -> dict[str, Any]:
    runs, approvals = RunStore(ws.engine), ApprovalStore(ws.engine)
    deadline = time.monotonic() + wait_s
    while True:
        row = runs.get(run_id)
        exited = proc.poll()
        if (row is not None and row["status"] in SETTLED) or exited is not None or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    if row is None:
        return {"status": "not_started" if exited is not None else "starting", "exit_code": exited}
    pending = [
        {"id": a["id"], "short_id": short_id(a["id"]), "action": a["action"]} for a in approvals.list("pending", run_id)
    ]
    note = (
        "waits for a person: `trainteam approvals show ID`, then approve or reject"
        if pending
        else "still running: list_runs / show_run follow it"
        if row["status"] in ("pending", "running")
        else None
    )
    return {"status": row["status"], "error": row["error"], "pending_approvals": pending, "note": note}


# ------------------------------------------------------------------ reading


def list_runs(ws, args: ListRunsArgs) -> dict[str, Any]:
    return {"runs": runs_public(ws, args.limit)}


def show_run(ws, args: RunRef) -> dict[str, Any]:
    return run_public(ws, args.run_id)


def list_approvals(ws, args: ListApprovalsArgs) -> dict[str, Any]:
    status = None if args.status == "all" else args.status
    rows = ApprovalStore(ws.engine).list(status, args.run_id)
    return {"approvals": [approval_evidence_view(r).model_dump(mode="json") for r in rows]}


def show_approval(ws, args: ApprovalRef) -> dict[str, Any]:
    return approval_evidence_view(resolve(ApprovalStore(ws.engine), args.approval_id)).model_dump(mode="json")


def lineage(ws, args: NodeRef) -> dict[str, Any]:
    """Every ancestor of a node: what it was derived from, trained on, produced by."""
    try:
        sub = ws.graph.lineage(args.node)
    except UnknownNode as exc:
        raise NotFound(str(exc.args[0])) from None
    nodes = sorted(sub.nodes(data=True), key=lambda x: (x[1]["kind"], x[0]))
    return {
        "nodes": [{"id": n, **d} for n, d in nodes],
        "edges": [{"src": u, "dst": v, "kind": k} for u, v, k in sub.edges(keys=True)],
    }


def graph_nodes(ws, args: GraphNodesArgs) -> dict[str, Any]:
    kinds = [k.value for k in NodeKind]
    if args.kind is not None and args.kind not in kinds:
        raise BadInput(f"kind: unknown node kind {args.kind!r} ({', '.join(kinds)})")
    return {"nodes": ws.graph.nodes(args.kind)[-args.limit :]}
