"""The built-in offline policy model: a deterministic, rule-based planner per persona.

It is a pydantic-ai ``FunctionModel`` (with a stream function), so it goes through
exactly the machinery a real model does: tool schemas, validation, retries, deferred
approvals, hooks, message history. It reads the conversation (what its tools returned)
and decides the next call:

- every persona calls its step tool; plan-first tools are planned, then executed;
- the training_engineer reads the run planner's verdict: an impossible setting stops the
  step, a wasteful one is replaced by the planner's recommendation (as overrides), a plan
  over the time budget stops it;
- the eval_judge re-derives the gate from the measured metric and the task's threshold
  and reports "fail" if either it or the gate tool says so;
- nothing a tool returned (data records, summaries) is ever read as an instruction.

Tool-call ids are explicit and derived from the step, so a run's transcript is stable.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel

from trainteam.trainers.planning.advice import over_budget

# The metrics a persona's report names (by the last part of their key); agents/compact.py shows only these.
REPORTED_METRICS = (
    "final_loss",
    "exact_match",
    "rouge_l",
    "chrf",
    "form_rate",
    "accuracy",
    "n_train",
    "n_eval",
    "steps",
    "kept",
    "removed",
)


@dataclass
class StepFacts:
    """What the policy knows besides the conversation: the step and, for the judge, the gate rule."""

    persona: str
    step: str
    visit: int
    tool: str
    plan_first: bool
    gate_metric: str | None = None
    gate_min: float | None = None
    measured: dict[str, float] = field(default_factory=dict)


def _returns(messages: list[ModelMessage], tool: str) -> list[Any]:
    """Contents returned for ``tool`` (tool results, denials, retry prompts), oldest first."""
    out: list[Any] = []
    for m in messages:
        if not isinstance(m, ModelRequest):
            continue
        for p in m.parts:
            if isinstance(p, ToolReturnPart) and p.tool_name == tool:
                out.append(p.content)
            elif isinstance(p, RetryPromptPart) and p.tool_name == tool:
                out.append({"retry": p.model_response()})
    return out


def stream_of(fn):
    """A stream function emitting the same response as ``fn``, part by part (for event consumers)."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        response = fn(messages, info)
        for i, part in enumerate(response.parts):
            if isinstance(part, ToolCallPart):
                yield {
                    i: DeltaToolCall(
                        name=part.tool_name, json_args=part.args_as_json_str(), tool_call_id=part.tool_call_id
                    )
                }
            elif isinstance(part, TextPart):
                yield part.content

    return stream


class OfflinePolicy:
    """One persona's rule-based policy for one step."""

    def __init__(self, facts: StepFacts):
        self.facts = facts

    # -- helpers ---------------------------------------------------------
    def _id(self, messages: list[ModelMessage]) -> str:
        turn = sum(isinstance(m, ModelResponse) for m in messages)
        return f"{self.facts.step}-{self.facts.visit}-{turn}"

    def _call(self, messages, tool: str, args: dict[str, Any]) -> ModelResponse:
        return ModelResponse(
            parts=[ToolCallPart(tool, args, tool_call_id=self._id(messages))], model_name="trainteam-offline"
        )

    def _finish(
        self, messages, info: AgentInfo, summary: str, decision: str = "proceed", reasons: list[str] | None = None
    ) -> ModelResponse:
        name = next(t.name for t in info.output_tools if "Deferred" not in t.name)
        return self._call(messages, name, {"summary": summary, "decision": decision, "reasons": reasons or []})

    # -- the policy ------------------------------------------------------
    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        f = self.facts
        if f.tool not in {t.name for t in info.function_tools}:
            return self._finish(
                messages,
                info,
                f"{f.tool} is not one of my tools",
                "stop",
                [f"{f.persona} may use: {', '.join(t.name for t in info.function_tools)}"],
            )
        returns = _returns(messages, f.tool)
        if not returns:
            args: dict[str, Any] = {"reason": f"step {f.step} runs {f.tool}"}
            if f.plan_first:
                args["execute"] = False
            return self._call(messages, f.tool, args)
        last = returns[-1]
        if isinstance(last, str):  # a person's denial comes back as text
            return self._finish(messages, info, f"{f.tool} was not run: {last}", "stop", [last])
        if "retry" in last:
            return self._finish(messages, info, f"{f.tool} was rejected: {last['retry']}", "stop")
        if not last.get("executed"):
            return self._after_plan(messages, info, last.get("plan") or {})
        return self._report(messages, info, last)

    def _after_plan(self, messages, info, plan: dict[str, Any]) -> ModelResponse:
        f = self.facts
        overrides: dict[str, dict] = {}
        reasons: list[str] = []
        for stage, entry in (plan.get("stages") or {}).items():
            if not entry.get("runnable", True):
                why = "; ".join(f"{r['field']}: {r['reason']}" for r in entry.get("refusals", [])) or "refused"
                return self._finish(messages, info, f"{stage} cannot run as configured: {why}", "stop", [why])
            if entry.get("fixes"):
                overrides[stage] = entry["fixes"]
                reasons += [
                    f"{stage}: planner refused {r['field']} ({r['kind']}); applying its fix "
                    f"{ {k: v for k, v in entry['fixes'].items()} }"
                    for r in entry.get("refusals", [])
                ]
        est, budget = plan.get("est_minutes"), plan.get("budget_minutes")
        spent = plan.get("spent_minutes") or 0.0
        if est is not None and budget and est > budget - spent and not plan.get("budget_extended_by_person"):
            left = f"{budget - spent:.1f} min left of " if spent else ""
            why = f"the planner estimates {est:.1f} min, over the {left}{budget:g} min budget: " + over_budget(
                plan.get("stages") or {}, est, budget - spent, budget
            )
            return self._finish(messages, info, f"not starting {f.tool}: {why}", "stop", [why])
        accepted = f"plan accepted ({est} min estimated)" if est is not None else "plan accepted"
        args: dict[str, Any] = {"execute": True, "reason": "; ".join(reasons) or accepted}
        if overrides and any(overrides.values()):
            args["overrides"] = {k: v for k, v in overrides.items() if v}
        return self._call(messages, f.tool, args)

    def _report(self, messages, info, result: dict[str, Any]) -> ModelResponse:
        f = self.facts
        outcome = result.get("outcome")
        summary = str(result.get("summary", ""))[:500]
        if f.persona == "eval_judge" and f.tool == "gate":
            return self._judge(messages, info, result)
        if outcome == "error":
            return self._finish(messages, info, summary, "stop")
        if outcome == "spike":  # the trainer stopped at a spike: its restart proposal goes to a person
            return self._finish(
                messages, info, summary, "stop", ["spike: the restart proposal waits for a person's approval"]
            )
        if outcome == "spike_limit":  # no restart worth proposing: only a person may keep the pre-spike weights
            return self._finish(
                messages,
                info,
                summary,
                "stop",
                ["spike with no restart worth proposing: a person decides (on_gate_failure: ask)"],
            )
        if outcome == "over_budget":  # the work reached the run's ceiling, checkpoint saved
            return self._finish(
                messages,
                info,
                summary,
                "stop",
                ["budget reached: more time only with a person's exceed_budget approval"],
            )
        if outcome == "stage_gate_failed":  # an earlier curriculum stage failed its gate: a person decides
            return self._finish(
                messages,
                info,
                summary,
                "stop",
                ["stage gate failed: only a person can accept it (on_gate_failure: ask)"],
            )
        if outcome == "too_much_dropped":  # curation removed more than the task allows: not for me to wave on
            return self._finish(
                messages,
                info,
                summary,
                "stop",
                [
                    "curation removed more than max_drop_fraction: a person decides whether "
                    "training goes on with what is left"
                ],
            )
        if outcome == "failed":  # a check of the data failed (the pre-check): not for me to wave on
            return self._finish(
                messages,
                info,
                summary,
                "stop",
                ["the data pre-check failed: a person decides whether training goes on"],
            )
        metrics = result.get("metrics") or {}
        reasons = [
            f"{k}={v:.4g}"
            for k, v in sorted(metrics.items())
            if isinstance(v, (int, float)) and k.rsplit(".", 1)[-1] in REPORTED_METRICS
        ][:8]
        return self._finish(messages, info, summary, "proceed", reasons)

    def _judge(self, messages, info, result: dict[str, Any]) -> ModelResponse:
        """The gate from the numbers: fail if the metric is missing, below the threshold, or the tool failed it."""
        f = self.facts
        reasons = list(result.get("reasons") or [])
        verdict = result.get("outcome") == "passed"
        if f.gate_min is not None:
            value = f.measured.get(f.gate_metric or "")
            if value is None:
                verdict = False
                reasons.append(f"judge: {f.gate_metric} was not measured")
            elif value < f.gate_min:
                verdict = False
                reasons.append(f"judge: {f.gate_metric} {value:.4f} < {f.gate_min:.4f}")
            else:
                reasons.append(f"judge: {f.gate_metric} {value:.4f} >= {f.gate_min:.4f}")
        # the gate tool's diagnosis of a failure and its retry plan (trainers.diagnosis), as its summary states them
        diagnosed = str(result.get("summary") or "").partition("; diagnosis ")[2]
        if diagnosed and not verdict:
            reasons.append(f"judge: diagnosis {diagnosed}")
        return self._finish(
            messages, info, f"gate {'passed' if verdict else 'failed'}", "pass" if verdict else "fail", reasons
        )


def offline_model(facts: StepFacts) -> FunctionModel:
    policy = OfflinePolicy(facts)
    return FunctionModel(policy, stream_function=stream_of(policy), model_name=f"offline-{facts.persona}")


def replay_model(responses: list[ModelResponse], name: str = "replay") -> FunctionModel:
    """A model that answers with recorded responses in order (deterministic re-execution)."""
    queue = list(responses)

    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if not queue:
            raise RuntimeError("replay: the run asked the model more often than the transcript recorded")
        return queue.pop(0)

    return FunctionModel(respond, stream_function=stream_of(respond), model_name=name)
