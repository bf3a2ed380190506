"""Orchestration overhead: the train_model workflow against its bare tool calls.

The same task runs twice in one process, each in a fresh workspace:
1. bare: every tool of the workflow called directly, in order, with the outputs of the
   steps before it (no personas, no DBOS, no approvals, no transcripts);
2. orchestrated: the real workflow — DBOS steps, the personas' pydantic-ai Agents on the
   offline policy model, graph hooks, transcripts, and the register_model approval
   (decided at once by a pre-approver, as `--yes` does).
Imports are warmed first, so both sides pay only their own work. Overhead =
(orchestrated wall − bare wall) / bare wall. Goal: ≤ 3 %.

Ends with one line `RESULT {json}`.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

TASK = {
    "name": "overhead",
    "model": {"hidden_size": 64, "num_layers": 2, "num_heads": 4, "max_position_embeddings": 64},
    "data": {"demo": "addition", "n_train": 4000, "n_eval": 100, "max_operand": 99, "inject_leaks": 10},
    "tokenizer": {"vocab_size": 300},
    "stages": ["pretrain", "sft", "grpo"],
    "training": {
        "pretrain": {
            "max_steps": 60,
            "per_device_train_batch_size": 32,
            "max_length": 64,
            "learning_rate": 0.003,
            "save_steps": 30,
        },
        "sft": {"max_steps": 120, "per_device_train_batch_size": 64, "learning_rate": 0.003, "save_steps": 60},
        "grpo": {
            "max_steps": 10,
            "per_device_train_batch_size": 16,
            "learning_rate": 0.0001,
            "save_steps": 10,
            "grpo": {"num_generations": 8, "max_completion_length": 6},
        },
    },
    "gates": {"sft": {"metric": "exact_match", "min": 0.0}, "grpo": {"metric": "exact_match", "min": 0.0}},
    "budget": {"max_wall_minutes": 60},
}


def bare(ws, task, spec) -> tuple[float, list[str]]:
    from trainteam.contract.step_io import ToolContext
    from trainteam.graph import NodeKind
    from trainteam.workflows.steps import STEPS

    ws.graph.add_node(NodeKind.RUN, "bare")
    outputs: dict[str, dict] = {}
    t0 = time.perf_counter()
    current, ran = spec.start, []
    while current:
        step = spec.step(current)
        if spec.applies(step, task.stages):
            ctx = ToolContext(
                ws=ws,
                run_id="bare",
                step=current,
                visit=1,
                persona=step.persona,
                task=task,
                outputs=dict(outputs),
                inputs=dict(step.inputs),
                progress=False,
            )
            ws.graph.add_node(NodeKind.STEP, f"bare/{current}#1")
            out = STEPS[step.tool].run(ctx).model_dump(mode="json")
            ran.append(current)
        else:
            out = {"outcome": "skipped", "details": {}, "artifacts": {}, "metrics": {}, "nodes": {}}
        outputs[current] = out
        current, _ = spec.next_step(current, out["outcome"], {f"{e.source}->{e.target}": 9 for e in spec.edges})
    return time.perf_counter() - t0, ran


def orchestrated(ws, task, spec, run_id: str) -> tuple[float, dict]:
    from trainteam.commands.execute import PreApprover
    from trainteam.workflows.report.views import run_public
    from trainteam.workflows.runs.runner import run_foreground

    t0 = time.perf_counter()
    with PreApprover(ws, run_id, "benchmark (--yes)"):
        run_foreground(ws, spec, task, run_id, progress=False)
    return time.perf_counter() - t0, run_public(ws, run_id)


def main() -> None:
    os.environ.setdefault("TRAINTEAM_THREADS", "1")
    import torch

    torch.set_num_threads(int(os.environ["TRAINTEAM_THREADS"]))
    from trainteam.contract.train_task import parse_task
    from trainteam.workflows.engine.spec import load_builtin
    from trainteam.workspace import Workspace

    spec = load_builtin("train_model")
    task = parse_task(TASK, "benchmark task")
    tmp = Path(tempfile.mkdtemp(prefix="tt-overhead-"))
    # warm every import both paths use (trainers, TRL, PEFT, pydantic-ai, dbos)
    import dbos  # noqa: F401
    import peft  # noqa: F401
    import trl  # noqa: F401

    import trainteam.agents.runtime  # noqa: F401

    # ABBA order, fresh workspaces: the first run of a process pays warm-up (file caches,
    # lazy imports inside the libraries) that the second does not.
    b1, ran = bare(Workspace.open(tmp / "bare1"), task, spec)
    o1, view = orchestrated(Workspace.open(tmp / "orch1"), task, spec, "orchestrated1")
    o2, view = orchestrated(Workspace.open(tmp / "orch2"), task, spec, "orchestrated2")
    b2, _ = bare(Workspace.open(tmp / "bare2"), task, spec)
    bare_s, orch_s = (b1 + b2) / 2, (o1 + o2) / 2
    overhead = (orch_s - bare_s) / bare_s
    result = {
        "bare_s": round(bare_s, 2),
        "orchestrated_s": round(orch_s, 2),
        "overhead_ratio": round(overhead, 4),
        "rounds_s": {"bare": [round(b1, 2), round(b2, 2)], "orchestrated": [round(o1, 2), round(o2, 2)]},
        "steps": len(ran),
        "run_status": view["status"],
        "exact_match_bare_vs_orchestrated": view["metrics"].get("final_eval.exact_match"),
    }
    print(f"bare tool calls ({len(ran)} steps): {bare_s:.2f} s  (rounds {b1:.2f}, {b2:.2f})")
    print(f"orchestrated workflow:        {orch_s:.2f} s  (rounds {o1:.2f}, {o2:.2f}; status {view['status']})")
    print(f"overhead: {overhead:+.2%}  (goal <= 3 %)")
    print("RESULT " + json.dumps(result))
    sys.exit(0 if view["status"] == "completed" else 1)


if __name__ == "__main__":
    main()
