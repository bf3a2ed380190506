"""Transcripts as chat data with tool calls: one row per persona turn, in TRL's conversational format.

A persona turn is one agent segment of a step (``train#1``). Its row is::

    {"id": "<run>/<segment>", "run_id", "persona", "step", "segment",
     "messages": [system, user, assistant{tool_calls}, tool, ..., assistant{final answer}],
     "tools": [{"type": "function", "function": {"name", "description", "parameters"}}]}

- ``system`` is the persona's instructions (its card rendered for the step), ``user`` the step's prompt;
- every model response that calls a step tool is an assistant turn with ``tool_calls``
  (``{"type": "function", "id", "function": {"name", "arguments": {...}}}``), followed by one ``tool``
  turn per result (``tool_call_id``, ``name``, the result as JSON text; a retry prompt is the tool's
  answer too, as the model read it);
- the final answer is the last assistant turn: the persona's report (summary, decision, reasons) as
  JSON text. In the run it is pydantic-ai's output-tool call (``final_result``); as data it is the
  answer the turn teaches, so the row checks, ``formats.example`` and TRL all see an answer;
- ``tools`` are the JSON schemas of the step tools the persona was offered in that segment (the
  transcript's ``tools`` names them), as pydantic-ai builds them for the Agent from the card and the
  workflow's catalog.

``run_id``, ``persona``, ``step`` and ``segment`` ride along as extra columns: the canonical reader keeps
them, the trainers read only ``messages`` and ``tools``. Everything is redacted again on the way out.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, cast

from pydantic import BaseModel

from trainteam.agents import compact, transcripts
from trainteam.agents.cards import load_card
from trainteam.agents.runtime import _make_tool
from trainteam.contract.redaction import redact
from trainteam.contract.step_io import StepTool

FINAL = "final_result"


class ChatRow(BaseModel):
    """One persona turn as a conversational SFT row."""

    id: str
    run_id: str
    persona: str
    step: str
    segment: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]


def tool_schemas(persona: str, names: Iterable[str], toolbox: Mapping[str, StepTool]) -> list[dict[str, Any]]:
    """The OpenAI/TRL function schemas of the tools ``names`` of ``persona``'s card, as the runtime
    registers them with the Agent (``runtime._make_tool``: the card's grant, the step tool's arguments)."""
    card = load_card(persona)
    out = []
    for name in names:
        grant = card.grant(name)
        if grant is None or name not in toolbox:
            continue
        tdef = _make_tool(grant, toolbox[name]).tool_def
        out.append(
            {
                "type": "function",
                "function": {
                    "name": tdef.name,
                    "description": tdef.description or "",
                    "parameters": tdef.parameters_json_schema,
                },
            }
        )
    return out


def compact_tools(persona: str, tool: str, toolbox: Mapping[str, StepTool]) -> list[dict[str, Any]]:
    """The tools a compact run offers (``agents/compact.py``): the step's tool and the report."""
    from trainteam.agents.runtime import PersonaReport

    step = tool_schemas(persona, [tool], toolbox)
    fns = [
        compact.compact_tool(t["function"]["name"], t["function"]["description"], t["function"]["parameters"])
        for t in step
    ]
    return fns + [compact.final_tool(PersonaReport.model_json_schema())]


def _args(part: Mapping[str, Any]) -> Any:
    args = part.get("args")
    if isinstance(args, str):
        try:
            return json.loads(args)
        except ValueError:
            return args
    return args or {}


def _text(content: Any) -> str:
    return content if isinstance(content, str) else json.dumps(content, sort_keys=True, default=str)


def _response(parts: list[Mapping[str, Any]], final_call: bool = False) -> list[dict[str, Any]]:
    """A model response as assistant turns: its step-tool calls, or its final answer (as text, or as the
    ``final_result`` call a compact run makes when ``final_call``)."""
    text = "".join(str(p.get("content") or "") for p in parts if p.get("part_kind") == "text")
    calls = [p for p in parts if p.get("part_kind") == "tool-call"]
    steps = [p for p in calls if not str(p.get("tool_name", "")).startswith(FINAL)]
    final = next((p for p in calls if str(p.get("tool_name", "")).startswith(FINAL)), None)
    turns = []
    if steps:
        turns.append(
            {
                "role": "assistant",
                "content": text,
                "tool_calls": [
                    {
                        "type": "function",
                        "id": p.get("tool_call_id"),
                        "function": {"name": p["tool_name"], "arguments": _args(p)},
                    }
                    for p in steps
                ],
            }
        )
    if final is not None and final_call:
        turns.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "type": "function",
                        "id": final.get("tool_call_id"),
                        "function": {"name": compact.FINAL, "arguments": _args(final)},
                    }
                ],
            }
        )
    elif final is not None:
        turns.append({"role": "assistant", "content": _text(_args(final))})
    elif not steps and text:
        turns.append({"role": "assistant", "content": text})
    return turns


def _as_sent(p: Mapping[str, Any]) -> str:
    """A tool result's text exactly as pydantic-ai sends it to an OpenAI-style model in a compact run
    (``compact.result_view``)."""
    from pydantic_ai.messages import RetryPromptPart, ToolReturnPart

    if p.get("part_kind") == "retry-prompt":
        return RetryPromptPart(
            content=cast("str | list[Any]", p.get("content")),  # as stored: the text or pydantic's error details
            tool_name=p.get("tool_name"),
            tool_call_id=p["tool_call_id"],
        ).model_response()
    return ToolReturnPart(
        tool_name=p.get("tool_name") or "",
        content=compact.result_view(p.get("content")),
        tool_call_id=p["tool_call_id"],
    ).model_response_str()


def _request(parts: list[Mapping[str, Any]], answered: set[str], exact: bool = False) -> list[dict[str, Any]]:
    """A request's parts as user and tool turns (results of the output tool are pydantic-ai's, left out);
    ``exact``: tool results in pydantic-ai's own JSON text (key order and spacing as the model read them)."""
    turns = []
    for p in parts:
        kind = p.get("part_kind")
        if kind == "user-prompt":
            turns.append({"role": "user", "content": _text(p.get("content"))})
        elif kind in ("tool-return", "retry-prompt") and p.get("tool_call_id") in answered:
            turns.append(
                {
                    "role": "tool",
                    "tool_call_id": p["tool_call_id"],
                    "name": p.get("tool_name") or "",
                    "content": _as_sent(p) if exact else _text(p.get("content")),
                }
            )
        elif kind == "retry-prompt" and not p.get("tool_call_id"):
            turns.append({"role": "user", "content": _text(p.get("content"))})
    return turns


def chat_messages(record: Mapping[str, Any], style: str = "full") -> list[dict[str, Any]]:
    """A transcript's conversation as chat turns (system, user, assistant/tool ..., final answer); with
    ``style`` compact, the compact system turn and the final answer as a ``final_result`` call."""
    msgs: list[dict[str, Any]] = []
    if style == "compact":
        msgs.append({"role": "system", "content": compact.instructions(load_card(record["persona"]), record["tool"])})
    elif record.get("instructions"):
        msgs.append({"role": "system", "content": record["instructions"]})
    answered: set[str] = set()
    for m in record.get("messages", []):
        parts = m.get("parts", [])
        if m.get("kind") == "response":
            turns = _response(parts, final_call=style == "compact")
            answered |= {
                c["id"]
                for t in turns
                for c in t.get("tool_calls", [])
                if c.get("id") and c["function"]["name"] != compact.FINAL
            }
            msgs += turns
        else:
            msgs += _request(parts, answered, exact=style == "compact")
    return msgs


def chat_row(record: Mapping[str, Any], toolbox: Mapping[str, StepTool], style: str = "full") -> ChatRow:
    """One transcript (one persona turn) as a row, redacted; ``style`` compact: as a compact run sees it."""
    if style == "compact":
        tools = compact_tools(record["persona"], record["tool"], toolbox)
    else:
        tools = record.get("tool_schemas") or tool_schemas(record["persona"], record.get("tools", []), toolbox)
    # the order the runtime declares each call's fields in (a stored schema's keys are sorted, as transcripts are)
    live = tools if style == "compact" else tool_schemas(record["persona"], record.get("tools", []), toolbox)
    row = {
        "id": f"{record['run_id']}/{record['segment']}",
        "run_id": record["run_id"],
        "persona": record["persona"],
        "step": record["step"],
        "segment": record["segment"],
        "messages": in_schema_order(chat_messages(record, style), live + tools),
        "tools": tools,
    }
    return ChatRow.model_validate(redact(row))


def in_schema_order(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each call's arguments in the order its tool's schema declares them, not the sorted order transcripts
    store: a model writes a call left to right, so the order decides what each value is conditioned on.
    Measured (benchmarks/self_improve.py): with ``execute`` before ``reason`` the trained model wrote the
    right reason and the wrong ``execute`` on first calls; the schema puts ``reason`` first."""
    order: dict[str, list[str]] = {}
    for t in tools:  # the first schema of a name decides
        order.setdefault(t["function"]["name"], list((t["function"].get("parameters") or {}).get("properties") or {}))

    def ordered(call: dict[str, Any]) -> dict[str, Any]:
        fn, keys = call["function"], order.get(call["function"]["name"], [])
        args = fn.get("arguments")
        if not isinstance(args, dict) or not keys:
            return call
        rank = {k: i for i, k in enumerate(keys)}
        args = dict(sorted(args.items(), key=lambda kv: rank.get(kv[0], len(rank))))
        return {**call, "function": {**fn, "arguments": args}}

    return [{**m, "tool_calls": [ordered(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m for m in messages]


def _finished(messages: list[dict[str, Any]]) -> bool:
    """The turn ends with the persona's report (its text, or a compact run's ``final_result`` call)."""
    if not messages or messages[-1]["role"] != "assistant":
        return False
    calls = messages[-1].get("tool_calls") or []
    return not calls or calls[-1]["function"]["name"] == compact.FINAL


def chat_rows(
    ws,
    run_ids: Iterable[str],
    toolbox: Mapping[str, StepTool],
    *,
    personas: Iterable[str] = (),
    steps: Iterable[str] = (),
    style: str = "full",
) -> list[ChatRow]:
    """The completed persona turns of ``run_ids`` (in order), those of ``personas`` and ``steps`` when
    given, each ending with its final answer; ``style``: the prompt they are written with (``agents/compact``)."""
    want_p, want_s = set(personas), set(steps)
    rows = []
    for rid in run_ids:
        for rec in transcripts.read_run(ws, rid):
            if (
                rec.get("status") != "completed"
                or (want_p and rec["persona"] not in want_p)
                or (want_s and rec["step"] not in want_s)
            ):
                continue
            row = chat_row(rec, toolbox, style)
            if _finished(row.messages):
                rows.append(row)
    return rows


def gate_outcomes(ws, run_id: str) -> dict[str, str | None]:
    """Each gate step's outcome at its last visit (the transcripts whose tool is ``gate``)."""
    last: dict[str, str | None] = {}
    for rec in transcripts.read_run(ws, run_id):
        if rec.get("tool") == "gate":
            last[rec["step"]] = (rec.get("result") or {}).get("outcome")
    return last


def gates_passed(ws, run_id: str) -> bool:
    """Every gate step of the run passed at its last visit."""
    return all(outcome == "passed" for outcome in gate_outcomes(ws, run_id).values())
