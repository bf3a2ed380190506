"""Tool-call agreement counts calls as the tool receives them: a left-out argument is its schema's
default, and ``action_agreement`` sets the free-text ``reason`` aside (agents/tool_agreement.py)."""

from __future__ import annotations

import json

from trainteam.agents.tool_agreement import CallTurn, measure

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "train",
            "parameters": {
                "type": "object",
                "properties": {
                    "reason": {"type": "string", "default": ""},
                    "execute": {"type": "boolean", "default": False},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "final_result",
            "parameters": {
                "type": "object",
                "properties": {"summary": {"type": "string"}, "decision": {"type": "string"}},
            },
        },
    },
]


class Scripted:
    """A chat model that answers each request with the next scripted call (OpenAI's reply shape)."""

    def __init__(self, calls):
        self.calls = list(calls)

    def complete(self, body):
        name, args = self.calls.pop(0)
        msg = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}],
        }
        return {"choices": [{"message": msg}]}


def _turn(name: str, args: dict) -> CallTurn:
    return CallTurn(
        run_id="r",
        persona="training_engineer",
        step="train",
        messages=[{"role": "user", "content": "go"}],
        tools=TOOLS,
        want={"name": name, "arguments": args},
    )


def test_defaults_count_as_given_and_reason_is_apart():
    turns = [
        _turn("train", {"reason": "plan it", "execute": False}),
        _turn("train", {"reason": "plan accepted (1.0 min estimated)", "execute": True}),
        _turn("train", {"reason": "plan accepted", "execute": True}),
        _turn("final_result", {"summary": "ok", "decision": "proceed"}),
    ]
    got = measure(
        Scripted(
            [
                ("train", {"reason": "plan it"}),  # execute left out: false, the default
                ("train", {"reason": "plan accepted", "execute": True}),  # other words, same action
                ("train", {"reason": "plan accepted", "execute": False}),  # the wrong action
                ("final_result", {"summary": "fine", "decision": "proceed"}),
            ]
        ),
        turns,
    )
    assert got.turns == 3 and got.final_turns == 1
    assert got.agreement == round(1 / 3, 4) and got.action_agreement == round(2 / 3, 4) and got.name_agreement == 1.0
    assert got.final_decision_agreement == 1.0 and got.final_agreement == 0.0
    assert [s["got"]["arguments"] for s in got.samples] == [
        {"reason": "plan accepted", "execute": True},
        {"reason": "plan accepted", "execute": False},
    ]
