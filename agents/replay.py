"""Reading and re-executing recorded agent runs.

``steps_of`` turns a run's transcripts into the step-by-step story a person reads
(persona, prompt, tool calls with arguments, results, decisions, approvals).
``replay_run`` re-executes the run in another (fresh) workspace: every persona is
rebuilt as recorded, but its model is a ``FunctionModel`` that answers with the
recorded responses in order, and a recorded approval is given back as the same
decision. The tools really run again, so a difference in the tool calls or in the
artifacts' content hashes shows that something outside the model changed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import BaseModel, Field
from pydantic_ai.messages import ModelResponse

from trainteam.agents import transcripts
from trainteam.agents.policy import replay_model
from trainteam.agents.runtime import resume_persona_step, run_persona_step
from trainteam.contract.step_io import StepArgs, StepInputs, StepTool, ToolContext
from trainteam.curation.builders import build_sft_examples


def _decision(record: dict[str, Any]) -> dict[str, Any] | None:
    for msg in reversed(record.get("messages", [])):
        for part in msg.get("parts", []):
            if part.get("part_kind") == "tool-call" and str(part.get("tool_name", "")).startswith("final_result"):
                return _args(part)
    return None


def _args(part: dict[str, Any]) -> dict[str, Any]:
    import json

    args = part.get("args")
    return json.loads(args) if isinstance(args, str) else (args or {})


def _returns(record: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for msg in record.get("messages", []):
        for part in msg.get("parts", []):
            if part.get("part_kind") in ("tool-return", "retry-prompt") and part.get("tool_call_id"):
                out[part["tool_call_id"]] = part.get("content")
    return out


def steps_of(ws, run_id: str) -> list[dict[str, Any]]:
    """The run as a person reads it, one entry per agent run."""
    steps = []
    for rec in transcripts.read_run(ws, run_id):
        returns = _returns(rec)
        calls = [{**c, "result": returns.get(c["id"])} for c in transcripts.tool_calls(rec)]
        steps.append(
            {
                "segment": rec["segment"],
                "step": rec["step"],
                "visit": rec["visit"],
                "persona": rec["persona"],
                "model": rec.get("model"),
                "status": rec.get("status"),
                "prompt": rec.get("prompt"),
                "instructions": rec.get("instructions", ""),
                "skills": rec.get("skills", []),
                "tools": rec.get("tools", []),
                "calls": calls,
                "decision": _decision(rec),
                "approvals": rec.get("approvals", []),
                "outcome": (rec.get("result") or {}).get("outcome"),
                "summary": (rec.get("result") or {}).get("summary"),
                "error": rec.get("error"),
                "seconds": rec.get("seconds"),
            }
        )
    return steps


class StepReplay(BaseModel):
    segment: str
    persona: str
    recorded_calls: list[dict[str, Any]]
    replayed_calls: list[dict[str, Any]]
    hash_differences: dict[str, list[str | None]] = Field(default_factory=dict)
    outcome: str | None = None
    error: str | None = None

    @property
    def same(self) -> bool:
        return self.recorded_calls == self.replayed_calls and not self.hash_differences and self.error is None


class ReplayReport(BaseModel):
    run_id: str
    workspace: str
    steps: list[StepReplay]

    @property
    def identical(self) -> bool:
        return all(s.same for s in self.steps)


def _strip(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"tool": c["tool"], "args": c["args"]} for c in calls]


def _responses(record: dict[str, Any]) -> list[ModelResponse]:
    return [m for m in transcripts.load_messages(record["messages"]) if isinstance(m, ModelResponse)]


def replay_run(
    source_ws, run_id: str, dest_ws, toolbox: Mapping[str, StepTool], load_task: Callable[[dict], Any]
) -> ReplayReport:
    """Re-run ``run_id`` of ``source_ws`` in ``dest_ws`` from the recorded model responses, with the
    workflow's step tools (``toolbox``) and its task type (``load_task``: recorded JSON → task)."""
    outputs: dict[str, dict] = {}
    report = ReplayReport(run_id=run_id, workspace=str(dest_ws.root), steps=[])
    for rec in transcripts.read_run(source_ws, run_id):
        # earlier steps' outputs: the replayed ones, else as recorded (a step run without a persona)
        given = {**(rec.get("outputs") or {}), **outputs}
        ctx = ToolContext(
            ws=dest_ws,
            run_id=run_id,
            step=rec["step"],
            visit=rec["visit"],
            persona=rec["persona"],
            task=load_task(rec["task"]),
            outputs=given,
            inputs=StepArgs.model_validate(rec.get("inputs") or {}),
            decided=StepInputs.model_validate(rec.get("decided") or {}),
            toolbox=toolbox,
            progress=False,
        )
        model = replay_model(_responses(rec), name=f"replay-{rec['persona']}")
        error = None
        try:
            result = run_persona_step(ctx, rec["tool"], model=model)
            for decision in rec.get("approvals", [])[:1]:
                pending = result.needs.resume.pending if result.needs is not None else None
                if result.outcome != "needs_approval" or pending is None:
                    error = f"recorded an approval, but the replay did not ask for one ({result.outcome})"
                    break
                result = resume_persona_step(
                    ctx, rec["tool"], pending, decision["approved"], decision.get("note"), model=model
                )
        except Exception as exc:  # the recorded run may have failed the same way; compare below
            result, error = None, f"{type(exc).__name__}: {exc}".splitlines()[0]
            if rec.get("status") == "error" and rec.get("error") == error:
                error = None
        replayed = transcripts.read_run(dest_ws, run_id)
        mine = next((r for r in replayed if r["segment"] == rec["segment"]), None)
        new_hashes = (mine or {}).get("artifact_hashes", {})
        old_hashes = rec.get("artifact_hashes", {})
        diffs = {
            k: [old_hashes.get(k), new_hashes.get(k)]
            for k in set(old_hashes) | set(new_hashes)
            if old_hashes.get(k) != new_hashes.get(k)
        }
        report.steps.append(
            StepReplay(
                segment=rec["segment"],
                persona=rec["persona"],
                recorded_calls=_strip(transcripts.tool_calls(rec)),
                replayed_calls=_strip(transcripts.tool_calls(mine)) if mine else [],
                hash_differences=diffs,
                outcome=result.outcome if result is not None else None,
                error=error,
            )
        )
        if result is not None and rec.get("status") == "completed":
            outputs[rec["step"]] = result.model_dump(mode="json")
    return report


def sft_examples(ws, run_ids: list[str] | None = None) -> list[dict]:
    """SFT data from the team's own successful agent runs, through the curation builders."""
    ids = run_ids or sorted(p.name for p in ws.dir("transcripts").iterdir() if p.is_dir())
    traces = []
    for rid in ids:
        for rec in transcripts.read_run(ws, rid):
            system = [{"role": "system", "content": rec.get("instructions", "")}] if rec.get("instructions") else []
            traces.append({"messages": system + rec.get("messages", []), "ok": rec.get("status") == "completed"})
    return build_sft_examples(traces)
