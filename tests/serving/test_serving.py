"""The serving seam answered over real HTTP on 127.0.0.1 by the openai client."""

from __future__ import annotations

import pytest

from trainteam.trainers.serving.endpoint import ChatModel, ChatServer


@pytest.fixture(scope="module")
def server(tiny_checkpoint):
    with ChatServer(ChatModel(tiny_checkpoint, "m-tiny"), port=0, api_key="k-test") as srv:
        yield srv


def _client(server, key="k-test"):
    from openai import OpenAI

    return OpenAI(base_url=server.base_url, api_key=key, max_retries=0, timeout=600)


def test_chat_completion_answers_like_the_model(server, tiny_checkpoint, addition_data):
    """Over HTTP, the served answer is the model's own greedy answer in the training format."""
    from trainteam.trainers.evaluation.battery import exact_match
    from trainteam.trainers.training.tokenizer import load_tokenizer

    probs = addition_data[1][:4]
    expected = exact_match(tiny_checkpoint, load_tokenizer(tiny_checkpoint), probs).samples
    client = _client(server)
    for prob, sample in zip(probs, expected, strict=True):
        resp = client.chat.completions.create(
            model="m-tiny", messages=[{"role": "user", "content": prob["prompt"]}], temperature=0, max_tokens=8
        )
        choice = resp.choices[0]
        assert choice.message.role == "assistant"
        assert choice.message.content == sample["got"]
        assert choice.finish_reason == "stop"
        assert resp.model == "m-tiny" and resp.usage.completion_tokens >= 1


def test_models_listed_and_errors_in_openai_shape(server):
    import openai

    client = _client(server)
    assert [m.id for m in client.models.list().data] == ["m-tiny"]
    with pytest.raises(openai.NotFoundError, match="not served here"):
        client.chat.completions.create(model="other", messages=[{"role": "user", "content": "1+1="}])
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(model="m-tiny", messages=[])
    with pytest.raises(openai.AuthenticationError):
        _client(server, key="wrong").models.list()


def test_length_limit_reported(server):
    resp = _client(server).chat.completions.create(
        model="m-tiny", messages=[{"role": "user", "content": "9+9="}], max_tokens=1, temperature=0
    )
    assert resp.choices[0].finish_reason == "length"
    assert resp.usage.completion_tokens == 1 and len(resp.choices[0].message.content) == 1


def test_only_loopback():
    from trainteam.core.errors import BadInput

    with pytest.raises(BadInput, match="loopback"):
        ChatServer(None, host="0.0.0.0")


def test_a_pydantic_ai_agent_can_use_the_served_model(server, tiny_checkpoint):
    """What binding a persona to a trained model means: an Agent over the OpenAI provider."""
    from pydantic_ai import Agent
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from trainteam.trainers.evaluation.battery import exact_match
    from trainteam.trainers.training.tokenizer import load_tokenizer

    model = OpenAIChatModel("m-tiny", provider=OpenAIProvider(base_url=server.base_url, api_key="k-test"))
    out = Agent(model).run_sync("3+5=", model_settings={"temperature": 0.0, "max_tokens": 8}).output
    expected = exact_match(tiny_checkpoint, load_tokenizer(tiny_checkpoint), [{"prompt": "3+5=", "completion": ""}])
    assert out == expected.samples[0]["got"]


def test_backend_choice_without_vllm():
    import importlib.util

    from trainteam.core.errors import BadInput
    from trainteam.trainers.serving.endpoint import choose_backend, vllm_command

    if importlib.util.find_spec("vllm") is None:
        assert choose_backend("auto") == "transformers"
        with pytest.raises(BadInput, match="vLLM is not installed"):
            choose_backend("vllm")
    cmd = vllm_command("/ckpt", "m-1", 8123)
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1" and "--trust-remote-code" not in cmd


def test_streaming_matches_the_whole_answer(server):
    client = _client(server)
    msgs = [{"role": "user", "content": "4+5="}]
    whole = client.chat.completions.create(model="m-tiny", messages=msgs, temperature=0, max_tokens=8)
    chunks = list(
        client.chat.completions.create(
            model="m-tiny",
            messages=msgs,
            temperature=0,
            max_tokens=8,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == whole.choices[0].finish_reason
    assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    # The server is free again after a stream.
    assert client.chat.completions.create(model="m-tiny", messages=msgs, temperature=0, max_tokens=8).choices
