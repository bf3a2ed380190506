"""Transcripts: each persona run's pydantic-ai messages as JSON, per step, redacted.

``<workspace>/transcripts/<run_id>/<step>#<visit>.json`` (a second agent run of the
same step visit — a restart after a loss spike, a re-run after a crash — gets
``<step>#<visit>.2.json``). A run that waits for an approval is written with status
``needs_approval`` and overwritten when it resumes, so one file tells the whole step.
A Transcript graph node ``records`` the step.
"""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainteam.contract.redaction import redact
from trainteam.core.errors import NotFound
from trainteam.core.ids import check_run_id
from trainteam.graph.record import record_transcript

if TYPE_CHECKING:  # pydantic_ai costs ~0.8 s to import; listing transcripts must not pay it
    from pydantic_ai.messages import ModelMessage

VERSION = 1


def utcnow() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def run_dir(ws, run_id: str) -> Path:
    return ws.dir("transcripts") / check_run_id(run_id)


def choose_segment(ws, run_id: str, step: str, visit: int, execution: str = "") -> str:
    """``step#visit``, or the next free ``step#visit.k`` when an earlier agent run of it finished. The
    segment an agent run of the same engine ``execution`` wrote is reused: a process killed after the
    transcript was written and before the step was recorded finished runs the same execution again, and
    must record the same facts, not a second set."""
    base = f"{step}#{visit}"
    folder = run_dir(ws, run_id)
    k = 1
    while True:
        name = base if k == 1 else f"{base}.{k}"
        path = folder / f"{name}.json"
        if not path.exists():
            return name
        try:
            earlier = json.loads(path.read_text())
        except ValueError:
            return name  # a torn write from a killed process: replace it
        if earlier.get("status") == "needs_approval" or (execution and earlier.get("execution") == execution):
            return name  # the same agent run, resumed or run again after a crash
        k += 1


def dump_messages(messages: list[ModelMessage]) -> list[dict[str, Any]]:
    from pydantic_ai import ModelMessagesTypeAdapter

    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def load_messages(data: list[dict[str, Any]]) -> list[ModelMessage]:
    from pydantic_ai import ModelMessagesTypeAdapter

    return ModelMessagesTypeAdapter.validate_python(data)


def write(ws, record: dict[str, Any]) -> Path:
    """Write one transcript (redacted, atomically) and its graph node."""
    record = redact({**record, "version": VERSION, "written_at": utcnow()})
    folder = run_dir(ws, record["run_id"])
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{record['segment']}.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1, sort_keys=True, default=str))
    os.replace(tmp, path)
    step_node = f"Step:{record['run_id']}/{record['step']}#{record['visit']}"
    if ws.graph.has_node(step_node):
        record_transcript(
            ws.graph,
            run_id=record["run_id"],
            segment=record["segment"],
            step_node=step_node,
            path=str(path),
            persona=record["persona"],
            tool=record["tool"],
            model=record["model"],
        )
    return path


def read_run(ws, run_id: str) -> list[dict[str, Any]]:
    """All transcripts of a run, in the order their agent runs started."""
    folder = run_dir(ws, run_id)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not files:
        raise NotFound(f"run: no transcripts for run {run_id!r} in {ws.dir('transcripts')}")
    records = [json.loads(p.read_text()) for p in files]
    return sorted(records, key=lambda r: (r.get("started_at", ""), r["segment"]))


def tool_calls(record: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool calls of a transcript (name, args, id), in order, output tools excluded."""
    calls = []
    for msg in record.get("messages", []):
        if msg.get("kind") != "response":
            continue
        for part in msg.get("parts", []):
            if part.get("part_kind") == "tool-call" and not str(part.get("tool_name", "")).startswith("final_result"):
                args = part.get("args")
                if isinstance(args, str):
                    try:
                        args = json.loads(args)
                    except ValueError:
                        pass
                calls.append({"tool": part["tool_name"], "args": args, "id": part.get("tool_call_id")})
    return calls
