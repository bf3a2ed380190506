"""`trainteam serve` answers OpenAI tool requests with tool_calls, over real HTTP on 127.0.0.1.

The model is real: a tiny Llama trained on a conversation whose answer is a Hermes tool call
(tests/tool_model.py), so what comes back is parsed from what it generated."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from tool_model import tool_call_text, train_tool_model

from trainteam.trainers.serving.endpoint import ChatModel, ChatServer

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
HELLO = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(scope="module")
def tool_model(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    return train_tool_model(
        tmp_path_factory.mktemp("toolm"),
        [
            (ASK, [WEATHER], tool_call_text("get_weather", {"city": "Paris"})),
            (HELLO, None, "Hello there!"),
        ],
    )


@pytest.fixture(scope="module")
def server(tool_model):
    with ChatServer(ChatModel(tool_model, "m-tool", max_new_tokens=48), port=0) as srv:
        yield srv


def _client(server):
    from openai import OpenAI

    return OpenAI(base_url=server.base_url, api_key="local", max_retries=0, timeout=600)


def test_a_tools_request_gets_the_models_tool_call(server):
    resp = _client(server).chat.completions.create(model="m-tool", messages=ASK, tools=[WEATHER], temperature=0)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert not choice.message.content
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_streamed_tool_call_arrives_as_deltas(server):
    chunks = list(
        _client(server).chat.completions.create(
            model="m-tool", messages=ASK, tools=[WEATHER], temperature=0, stream=True
        )
    )
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    assert [tc.function.name for tc in calls] == ["get_weather"]
    assert calls[0].index == 0 and calls[0].id.startswith("call_")
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_without_tools_the_answer_is_plain_content(server):
    client = _client(server)
    hello = client.chat.completions.create(model="m-tool", messages=HELLO, temperature=0)
    assert hello.choices[0].message.content == "Hello there!" and hello.choices[0].message.tool_calls is None
    assert hello.choices[0].finish_reason == "stop"
    # tool_choice "none": the same question is answered as text; nothing is parsed into a call
    none = client.chat.completions.create(
        model="m-tool", messages=ASK, tools=[WEATHER], tool_choice="none", temperature=0
    )
    assert none.choices[0].message.tool_calls is None and none.choices[0].finish_reason != "tool_calls"


def test_a_conversation_with_a_tool_result_is_served(server):
    """The turn after a call: the assistant's call (arguments a JSON string) and the tool's result."""
    msgs = ASK + [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny, 21 C"},
    ]
    resp = _client(server).chat.completions.create(
        model="m-tool", messages=msgs, tools=[WEATHER], temperature=0, max_tokens=8
    )
    assert resp.choices[0].finish_reason in ("stop", "length", "tool_calls")


def _post(server, body: dict) -> tuple[int, dict]:
    req = urllib.request.Request(
        server.base_url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=600) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"tools": "get_weather"}, "tools: "),
        ({"tools": [{"type": "function", "function": {"description": "no name"}}]}, "tools[0].function.name: "),
        ({"tools": [{"type": "retrieval"}]}, "tools[0].type: "),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}]},
            "tools[0].function.parameters: ",
        ),
        ({"tools": [WEATHER], "tool_choice": "always"}, "tool_choice: "),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice.function.name: ",
        ),
        ({"tool_choice": "required"}, "tool_choice: needs tools"),
    ],
)
def test_bad_tools_are_a_one_line_400_naming_the_field(server, changes, field):
    status, body = _post(server, {"model": "m-tool", "messages": ASK, **changes})
    assert status == 400, body
    message = body["error"]["message"]
    assert message.startswith(field) and "\n" not in message
    assert body["error"]["type"] == "invalid_request_error"


def test_unparseable_calls_are_plain_content(tool_model):
    """A `<tool_call>` that is not JSON (or names no function) comes back as the text it was."""
    from trainteam.trainers.serving.tool_calls import StreamedCalls, ToolSet, parse_output
    from trainteam.trainers.training.tokenizer import load_tokenizer

    tok, tools = load_tokenizer(tool_model), ToolSet(tools=[WEATHER], parse=True)
    prefix = "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    for bad in (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": </tool_call>',
        '<tool_call>\n{"arguments": {}}\n</tool_call>',
    ):
        assert parse_output(tok, bad, bad, prefix, tools) == (bad, None)
        stream = StreamedCalls(tok, prefix, tools)
        deltas = [d for piece in (bad[:12], bad[12:]) for d in stream.feed(piece)] + list(stream.feed("", last=True))
        assert "".join(d.get("content", "") for d in deltas) == bad and stream.calls == 0
    good = tool_call_text("get_weather", {"city": "Oslo"})
    content, calls = parse_output(tok, "Sure." + good, "Sure." + good, prefix, tools)
    assert content == "Sure." and json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"}
