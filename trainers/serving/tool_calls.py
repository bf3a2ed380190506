"""OpenAI tool calling for the served model: the request's ``tools``/``tool_choice`` checked, the
model's output parsed into ``tool_calls`` (whole, or as a stream of deltas).

Parsing is transformers' own (``tokenizer.parse_response`` / ``get_response_parser``, the declarative
``response_template`` that ``transformers serve`` parses with): a tokenizer that ships a
``response_template`` is parsed with it; any other one with the Hermes shape the ChatML tool templates
(SmolLM2, Qwen 2.x, Hermes) ask for, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``,
the template ``transformers serve`` itself falls back to for Qwen 2, closed at this tokenizer's own end
tokens. An output that does not parse is the plain content answer it always was (never a 500).

``transformers serve`` is not used as the server: it picks that fallback by ``model_type`` only
(a Llama — SmolLM2 and the team's own models — gets no tool parsing at all), it serves Hub ids and
downloads, and it has neither the loopback-only bind, the bearer key nor the plain prompt format the
team's task models are evaluated with (``serving.py``). vLLM, when chosen, does the same contract with
its own ``hermes`` tool parser (``serving.vllm_command``).
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

from pydantic import BaseModel

_NAME_RE = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_CHOICES = ("none", "auto", "required")


class ToolRequestError(Exception):
    """A ``tools`` / ``tool_choice`` that cannot be served: 400 with one line naming the field."""

    status = HTTPStatus.BAD_REQUEST

    def __init__(self, param: str, message: str):
        super().__init__(f"{param}: {message}")
        self.param, self.message = param, f"{param}: {message}"


class ToolSet(BaseModel):
    """What a request offers the model: the tools rendered into the prompt, and whether to parse calls."""

    tools: list[dict[str, Any]] = []
    parse: bool = False


def _check_tool(i: int, tool: Any) -> None:
    where = f"tools[{i}]"
    if not isinstance(tool, dict):
        raise ToolRequestError(where, 'an object {"type": "function", "function": {...}} is required')
    if tool.get("type", "function") != "function":
        raise ToolRequestError(f"{where}.type", f"only 'function' tools are served, not {tool.get('type')!r}")
    fn = tool.get("function")
    if not isinstance(fn, dict):
        raise ToolRequestError(f"{where}.function", "an object with a name is required")
    if not isinstance(fn.get("name"), str) or not _NAME_RE.match(fn["name"]):
        raise ToolRequestError(f"{where}.function.name", "a name of 1-64 letters, digits, _ or - is required")
    if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
        raise ToolRequestError(f"{where}.function.parameters", "a JSON schema object is required")


def tool_set(body: dict[str, Any]) -> ToolSet:
    """The request's tools after checking their shapes; ``tool_choice`` 'none' offers none, a named
    function offers only it. 'required' and a named choice are not forced by constrained decoding:
    the model's own output is parsed either way."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none"):
            raise ToolRequestError("tool_choice", "needs tools")
        return ToolSet()
    if not isinstance(tools, list):
        raise ToolRequestError("tools", "a list of function tools is required")
    for i, tool in enumerate(tools):
        _check_tool(i, tool)
    names = [t["function"]["name"] for t in tools]
    if choice is None or choice in _CHOICES:
        return ToolSet() if choice == "none" else ToolSet(tools=tools, parse=bool(tools))
    if isinstance(choice, str):
        raise ToolRequestError("tool_choice", f"{choice!r} is not one of none, auto, required or a function")
    name = (choice.get("function") or {}).get("name") if isinstance(choice, dict) else None
    if not isinstance(choice, dict) or choice.get("type", "function") != "function" or not isinstance(name, str):
        raise ToolRequestError("tool_choice", 'an object {"type": "function", "function": {"name": ...}} is required')
    if name not in names:
        raise ToolRequestError("tool_choice.function.name", f"{name!r} is not one of the tools ({', '.join(names)})")
    return ToolSet(tools=[t for t in tools if t["function"]["name"] == name], parse=True)


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages as chat templates read them: an assistant's tool-call ``arguments`` as a dict (OpenAI
    sends a JSON string), and no ``None`` content (templates concatenate it)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("content") is None:
            m["content"] = ""
        if isinstance(m.get("tool_calls"), list):
            calls = []
            for call in m["tool_calls"]:
                fn = dict((call or {}).get("function") or {})
                if isinstance(fn.get("arguments"), str):
                    try:
                        fn["arguments"] = json.loads(fn["arguments"] or "{}")
                    except json.JSONDecodeError:
                        pass  # the template shows the string as it came
                calls.append({**call, "function": fn})
            m["tool_calls"] = calls
        out.append(m)
    return out


def response_template(tokenizer) -> dict[str, Any]:
    """The tokenizer's own ``response_template``, else the Hermes one closed at its end tokens."""
    own = getattr(tokenizer, "response_template", None)
    if own:
        return own
    ends = sorted(
        {t for t in ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", tokenizer.eos_token) if t}, key=len, reverse=True
    )
    return {
        "defaults": {"role": "assistant"},
        "start_anchor": "<|im_start|>assistant\n",
        "fields": {
            "tool_calls": {
                "open_pattern": r"\s*<tool_call>",
                "close": "</tool_call>",
                "repeats": True,
                "content": "json",
                "transform": {"type": "function", "function": "{content}"},
            },
            "content": {"close_pattern": r"\s*(?:" + "|".join(re.escape(t) for t in ends) + ")", "content": "text"},
        },
    }


def parse_prefix(tokenizer, prompt: str) -> str:
    """The prompt as the parser's ``prefix``: whole for the tokenizer's own template; for the Hermes
    fallback only when it holds the assistant header (a template without it would parse the prompt)."""
    if getattr(tokenizer, "response_template", None) or "<|im_start|>assistant\n" in prompt:
        return prompt
    return ""


def _openai_call(value: Any, index: int) -> dict[str, Any]:
    """One parsed call in OpenAI's shape (``arguments`` a JSON string); ValueError when it is not a call."""
    fn = value.get("function") if isinstance(value, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
        raise ValueError("a tool call without a name")
    args = fn.get("arguments", fn.get("parameters", {}))
    if isinstance(args, str):
        args = json.loads(args or "{}")
    if not isinstance(args, dict):
        raise ValueError("tool call arguments are not an object")
    return {
        "index": index,
        "id": f"call_{secrets.token_hex(12)}",
        "type": "function",
        "function": {"name": fn["name"], "arguments": json.dumps(args)},
    }


def parse_output(tokenizer, raw: str, clean: str, prefix: str, tools: ToolSet) -> tuple[str | None, list | None]:
    """``(content, tool_calls)`` of a whole answer. ``raw`` keeps special tokens (delimiters may be
    ones), ``clean`` is the answer as plain content; an unparseable answer is ``(clean, None)``."""
    if not tools.parse:
        return clean, None
    try:
        parsed = tokenizer.parse_response(raw, response_template(tokenizer), prefix=prefix, tools=tools.tools)
        calls = [_openai_call(v, i) for i, v in enumerate(parsed.get("tool_calls") or [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        return clean, None
    if not calls:
        return clean, None
    return (parsed.get("content") or None), [{k: v for k, v in c.items() if k != "index"} for c in calls]


class StreamedCalls:
    """Deltas of a streamed answer: content as it comes, each tool call once its region closes.
    A call that does not parse goes out as the content it was; so does everything after it."""

    def __init__(self, tokenizer, prefix: str, tools: ToolSet):
        self.parser = tokenizer.get_response_parser(response_template(tokenizer), prefix=prefix, tools=tools.tools)
        self.calls = 0
        self.failed = False
        self._since_close, self._content_since_close = "", ""

    def feed(self, piece: str, *, last: bool = False) -> Iterator[dict[str, Any]]:
        """The deltas ``piece`` completes (``last``: the answer ended)."""
        if self.failed:
            if piece:
                yield {"content": piece}
            return
        self._since_close += piece
        try:
            events = self.parser.feed(piece)
            if last:
                events += self.parser.finalize()[1]
            deltas = [d for ev in events for d in self._deltas(ev)]
        except (ValueError, KeyError, TypeError, AttributeError, RuntimeError):
            self.failed = True
            rest = self._since_close[len(self._content_since_close) :]
            if rest:
                yield {"content": rest}
            return
        yield from deltas

    def _deltas(self, ev: dict[str, Any]) -> Iterator[dict[str, Any]]:
        if ev["type"] == "region_chunk" and ev.get("field") == "content" and not ev.get("dirty") and ev.get("text"):
            self._content_since_close += ev["text"]
            yield {"content": ev["text"]}
        elif ev["type"] == "region_close" and ev.get("field") == "tool_calls":
            call = _openai_call(ev.get("value"), self.calls)
            self.calls += 1
            self._since_close, self._content_since_close = "", ""
            yield {"tool_calls": [call]}
