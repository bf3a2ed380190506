"""A scripted OpenAI-compatible chat endpoint that plays one persona through a whole run.

It answers the two kinds of request a persona's provider receives:

* a step conversation (the request offers function tools besides the output tool): it calls the
  step's tool, the one the step prompt names ("do this step with `train`"), with ``execute: true``
  where the tool is plan-first, and once that tool has answered, the final report tool;
* a decision (``agents.decisions.decide``: the request offers only pydantic-ai's ``final_result``
  tool, whose parameters are the answer type's fields, e.g. ``AlignChoice``'s ``run`` and ``reason``):
  the answer the test scripted for that type, a function of the request (it may read the evidence
  the decision was asked with).

Every request body and Authorization header is kept for the test to read. Imported by name
(tests/conftest.py puts this folder on sys.path); serve it with ``local_http.serving``.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

from local_http import send_json
from pydantic import BaseModel

STEP_TOOL = re.compile(r"do this step with `(\w+)`")
Answer = Callable[[dict], str]  # the decision request's body -> the output tool call's arguments (a JSON string)


def answer_type(body: dict, types: list[type[BaseModel]]) -> type[BaseModel] | None:
    """Which of ``types`` a decision request asks for (its output tool's parameters are that type's
    fields); None for a step conversation (it offers the persona's tools)."""
    tools = [t["function"] for t in body.get("tools", [])]
    if any(not t["name"].startswith("final_result") for t in tools):
        return None
    (output,) = tools
    fields = set(output.get("parameters", {}).get("properties", {}))
    matching = [t for t in types if set(t.model_fields) == fields]
    if len(matching) != 1:
        raise AssertionError(f"a decision asking for fields {sorted(fields)}: no single scripted answer type")
    return matching[0]


def evidence_of(body: dict) -> dict:
    """The evidence JSON a decision was asked with (``decisions._prompt``'s user message)."""
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    return json.loads(user.split("Evidence (JSON):\n", 1)[1].split("\n\nDefault (", 1)[0])


def _step_call(body: dict) -> dict:
    tools = {t["function"]["name"]: t["function"] for t in body["tools"]}
    user = next(m["content"] for m in body["messages"] if m["role"] == "user")
    step_tool = STEP_TOOL.search(user).group(1)
    answered = [m for m in body["messages"] if m["role"] == "tool"]
    if not answered and step_tool in tools:
        args = {"reason": f"the step asks for {step_tool}"}
        if "execute" in tools[step_tool].get("parameters", {}).get("properties", {}):
            args["execute"] = True
        return {"name": step_tool, "arguments": json.dumps(args)}
    final = next(n for n in tools if n.startswith("final_result"))
    return {"name": final, "arguments": json.dumps({"summary": f"{step_tool} done", "decision": "proceed"})}


class ScriptedOpenAI(BaseHTTPRequestHandler):
    """Set ``answers`` (answer type -> Answer) with ``reset`` before serving; read ``requests`` / ``auth`` after."""

    answers: ClassVar[dict[type[BaseModel], Answer]] = {}
    requests: ClassVar[list[dict]] = []
    auth: ClassVar[list[str]] = []
    errors: ClassVar[list[str]] = []  # a request this script could not answer (answered 400): a test asserts none
    lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def reset(cls, answers: dict[type[BaseModel], Answer]) -> None:
        cls.answers, cls.requests, cls.auth, cls.errors = dict(answers), [], [], []

    @classmethod
    def decisions(cls, kind: type[BaseModel]) -> list[dict]:
        """The decision requests that asked for ``kind`` (e.g. ``AlignChoice``)."""
        return [b for b in cls.requests if answer_type(b, list(cls.answers)) is kind]

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with ScriptedOpenAI.lock:
            ScriptedOpenAI.requests.append(body)
            ScriptedOpenAI.auth.append(self.headers.get("Authorization", ""))
            n = len(ScriptedOpenAI.requests)
        try:
            call = self._call(body)
        except Exception as exc:  # noqa: BLE001 - the test reads it; the client gets a 400 it does not retry
            ScriptedOpenAI.errors.append(f"{type(exc).__name__}: {exc}")
            send_json(self, 400, {"error": {"message": "the script has no answer", "type": "invalid_request_error"}})
            return
        message = {"role": "assistant", "content": None,
                   "tool_calls": [{"id": f"call_{n}", "type": "function", "function": call}]}
        send_json(self, 200, {"id": f"cmpl-{n}", "object": "chat.completion", "created": 0, "model": body["model"],
                              "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
                              "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

    @staticmethod
    def _call(body: dict) -> dict:
        kind = answer_type(body, list(ScriptedOpenAI.answers))
        if kind is None:
            return _step_call(body)
        return {"name": body["tools"][0]["function"]["name"], "arguments": ScriptedOpenAI.answers[kind](body)}

    def log_message(self, *args):
        pass
