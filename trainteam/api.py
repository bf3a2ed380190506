"""The Python face of the CLI: the same operations, the same checks.

``graph_orchestrate(action="execute_workflow", name="train_model", task=...)`` is
the seed's entry point; the named functions are the readable form of it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.contract.train_task import TrainTask, load_task_file, parse_task
from trainteam.core.errors import BadInput
from trainteam.workflows.engine.approval_ids import approval_public
from trainteam.workflows.engine.approvals import decide
from trainteam.workflows.engine.store import ApprovalStore
from trainteam.workflows.report.views import run_public
from trainteam.workflows.requests.submission import parse_request
from trainteam.workflows.runs.runner import enqueue_run, prepare_run, resume_foreground, run_foreground
from trainteam.workspace import Workspace


def _ws(workspace: str | Path | Workspace | None) -> Workspace:
    return workspace if isinstance(workspace, Workspace) else Workspace.open(workspace)


def _task(task: Any, source: str = "task"):
    if isinstance(task, TrainTask):
        return task
    if isinstance(task, (str, Path)):
        return load_task_file(Path(task))
    return parse_task(task, source)


def execute_workflow(
    name: str = "train_model",
    task: Any = None,
    *,
    workspace=None,
    run_id: str | None = None,
    progress: bool = True,
    detach: bool = False,
) -> dict[str, Any]:
    """Run a workflow to its end (or until it fails) in this process; returns the run view.
    ``detach``: put it on the run queue for `trainteam worker` processes and return at once."""
    if task is None:
        raise BadInput("task: required (a TrainTask, a mapping, or a task YAML path)")
    new = prepare_run(name, _task(task), "task", run_id, "run_id", lambda: _ws(workspace))
    if detach:
        enqueue_run(new)
    else:
        run_foreground(new.ws, new.spec, new.task, new.run_id, progress=progress)
    return run_public(new.ws, new.run_id)


def submit(request: str, *, workspace=None, run_id: str | None = None, progress: bool = True) -> dict[str, Any]:
    """A request in natural language: the ml_orchestrator turns it into a validated task
    (refusing what is missing: model, data, budget), then the task runs."""
    task = parse_request(request, workspace=getattr(workspace, "root", workspace))  # its registered models too
    return execute_workflow(task.workflow, task, workspace=workspace, run_id=run_id, progress=progress)


def resume_run(run_id: str, *, workspace=None, force: bool = False, progress: bool = True) -> dict[str, Any]:
    ws = _ws(workspace)
    run_public(ws, run_id)
    resume_foreground(ws, run_id, force=force, progress=progress)
    return run_public(ws, run_id)


def get_run(run_id: str, *, workspace=None) -> dict[str, Any]:
    return run_public(_ws(workspace), run_id)


def list_approvals(status: str | None = "pending", *, workspace=None) -> list[dict[str, Any]]:
    return [approval_public(r) for r in ApprovalStore(_ws(workspace).engine).list(status)]


def approve(approval_id: str, *, by: str | None = None, note: str | None = None, workspace=None) -> dict[str, Any]:
    """A person's approval. Agents are never handed this function."""
    return decide(_ws(workspace), approval_id, approve=True, by=by, note=note)


def reject(approval_id: str, *, by: str | None = None, note: str | None = None, workspace=None) -> dict[str, Any]:
    return decide(_ws(workspace), approval_id, approve=False, by=by, note=note)


def graph_orchestrate(action: str, name: str = "train_model", task: Any = None, **kwargs: Any) -> dict[str, Any]:
    """The seed's single entry point: ``action`` in execute_workflow | resume | show."""
    if action == "execute_workflow":
        return execute_workflow(name, task, **kwargs)
    if action == "resume":
        return resume_run(kwargs.pop("run_id"), **kwargs)
    if action == "show":
        return get_run(kwargs.pop("run_id"), **kwargs)
    raise BadInput(f"action: unknown action {action!r} (execute_workflow, resume, show)")
