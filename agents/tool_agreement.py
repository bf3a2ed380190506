"""Tool-call agreement: does a model, asked as a persona on held-out steps, call what the offline policy called?

For every assistant turn of held-out chat rows (``agents/chat_export.py``) that calls a tool, the model
gets the turns before it and the row's tools (the OpenAI request a persona's run sends, through
``trainers/serving.ChatModel``, greedy) and agrees when its first tool call has the recorded call's
name and arguments, both as the tool receives them: an argument left out is its schema's default
(``{"reason": "r"}`` is ``{"reason": "r", "execute": false}`` to a plan-first tool, measured: the
trained model leaves the default out). ``agreement`` counts every argument, the free-text ``reason``
too; ``action_agreement`` all but ``reason`` (why the persona calls, recorded with the call, not acted
on). Step-tool calls are what is gated; the persona's report (``final_result``, in compact rows) is
counted apart, its ``decision`` field too — a gate's verdict rides on it.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, Field

from trainteam.curation.row_checks import ANSWER_TOOLS
from trainteam.trainers.serving.endpoint import ChatModel

FINAL = ANSWER_TOOLS[0]  # the persona's report as pydantic-ai's output tool (agents/compact.FINAL)


class CallTurn(BaseModel):
    """One held-out turn: what the model is asked, and the offline policy's call."""

    run_id: str
    persona: str
    step: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    want: dict[str, Any]


class Agreement(BaseModel):
    turns: int = 0
    agreement: float = 0.0  # step-tool calls with the same name and arguments (defaults filled in)
    action_agreement: float = 0.0  # the same, but for the free-text ``reason``
    name_agreement: float = 0.0
    final_turns: int = 0
    final_decision_agreement: float | None = None  # the report's decision, when rows end with final_result
    final_agreement: float | None = None  # the whole report equal
    by_persona: dict[str, float] = Field(default_factory=dict)
    samples: list[dict[str, Any]] = Field(default_factory=list)  # the first step-tool calls that disagreed
    wall_s: float = 0.0


def openai_messages(messages: list[dict]) -> list[dict]:
    """Chat rows' turns as an OpenAI request's (arguments as JSON text, no null keys)."""
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if v is not None}
        if m.get("tool_calls"):
            m["tool_calls"] = [
                {**c, "function": {"name": c["function"]["name"], "arguments": json.dumps(c["function"]["arguments"])}}
                for c in m["tool_calls"]
            ]
        out.append(m)
    return out


def call_turns(rows: Iterable[dict], personas: Iterable[str] = ()) -> list[CallTurn]:
    """Every tool-calling assistant turn of ``rows`` (of ``personas`` when given), with what came before."""
    want_p = set(personas)
    turns = []
    for row in rows:
        if want_p and row["persona"] not in want_p:
            continue
        msgs = row["messages"]
        for i, m in enumerate(msgs):
            if m.get("role") == "assistant" and m.get("tool_calls"):
                fn = m["tool_calls"][0]["function"]
                turns.append(
                    CallTurn(
                        run_id=row["run_id"],
                        persona=row["persona"],
                        step=row["step"],
                        messages=openai_messages(msgs[:i]),
                        tools=row["tools"],
                        want={"name": fn["name"], "arguments": fn["arguments"]},
                    )
                )
    return turns


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def _first_call(message: dict) -> dict | None:
    if not message.get("tool_calls"):
        return None
    fn = message["tool_calls"][0]["function"]
    try:
        return {"name": fn["name"], "arguments": json.loads(fn["arguments"])}
    except (json.JSONDecodeError, TypeError):
        return {"name": fn["name"], "arguments": fn["arguments"]}


def as_received(call: dict | None, tools: list[dict[str, Any]]) -> dict | None:
    """The call with each argument it left out set to its schema's default (top-level properties)."""
    if not call or not isinstance(call.get("arguments"), dict):
        return call
    schema = next((t["function"].get("parameters") or {} for t in tools if t["function"]["name"] == call["name"]), {})
    defaults = {
        k: v["default"] for k, v in (schema.get("properties") or {}).items() if isinstance(v, dict) and "default" in v
    }
    return {"name": call["name"], "arguments": {**defaults, **call["arguments"]}}


def _without_reason(call: dict | None) -> dict | None:
    if not call or not isinstance(call.get("arguments"), dict):
        return call
    return {"name": call["name"], "arguments": {k: v for k, v in call["arguments"].items() if k != "reason"}}


def _ratio(hits: int, n: int) -> float:
    return round(hits / n, 4) if n else 0.0


def measure(chat, turns: list[CallTurn], samples: int = 8) -> Agreement:
    """Ask ``chat`` (a ``serving.ChatModel``) every turn; count what agrees."""
    t0 = time.perf_counter()
    step_hits = actions = names = finals = final_hits = decisions = 0
    per: dict[str, list[int]] = {}
    out = Agreement()
    for turn in turns:
        reply = chat.complete({"messages": turn.messages, "tools": turn.tools, "temperature": 0})
        got = as_received(_first_call(reply["choices"][0]["message"]), turn.tools)
        want = cast(dict[str, Any], as_received(turn.want, turn.tools))  # a dict in gives a dict out
        if turn.want["name"] == FINAL:
            finals += 1
            final_hits += got == want
            decisions += (
                isinstance(got, dict)
                and bool(got)
                and isinstance(got["arguments"], dict)
                and (got["arguments"].get("decision", "proceed") == want["arguments"].get("decision", "proceed"))
            )
            continue
        hit = got == want
        step_hits += hit
        actions += _without_reason(got) == _without_reason(want)
        names += isinstance(got, dict) and bool(got) and got["name"] == turn.want["name"]
        per.setdefault(turn.persona, []).append(int(hit))
        if not hit and len(out.samples) < samples:  # the misses are what says what to fix
            content = reply["choices"][0]["message"].get("content") or ""
            out.samples.append({"step": turn.step, "want": turn.want, "got": got if got else content[:160]})
    n = len(turns) - finals
    return out.model_copy(
        update={
            "turns": n,
            "agreement": _ratio(step_hits, n),
            "action_agreement": _ratio(actions, n),
            "name_agreement": _ratio(names, n),
            "final_turns": finals,
            "final_agreement": _ratio(final_hits, finals) if finals else None,
            "final_decision_agreement": _ratio(decisions, finals) if finals else None,
            "by_persona": {p: _ratio(sum(v), len(v)) for p, v in sorted(per.items())},
            "wall_s": round(time.perf_counter() - t0, 1),
        }
    )


def agreement_of(folder: Path, turns: list[CallTurn], max_new_tokens: int = 96) -> Agreement:
    """``measure`` on the model in ``folder`` (loaded once, through the project's serving)."""
    return measure(ChatModel(folder, "candidate", max_new_tokens=max_new_tokens), turns)
