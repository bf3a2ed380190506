"""`model.chat_template`: a model whose ChatML template ignores tools (SmolLM2-Instruct's) trains on
tool-call chat rows through `train_model` with TRL's qwen2_5 template, stated by `validate`, saved with
the checkpoint, and served with tool calls parsed.

The model is a tiny Llama with a ChatML vocabulary and a plain ChatML template (tests/tool_model.py's
tokenizer), trained for real by a `trainteam execute-workflow` subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from tool_model import _tokenizer, tool_call_text

from trainteam.core.errors import BadInput
from trainteam.curation.formats import renders_tool_calls

CLI = [sys.executable, "-m", "trainteam.cli"]
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TRAINTEAM_THREADS": "1", "PYDANTIC_AI_NO_BANNER": "1"}
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)  # SmolLM2-Instruct's shape
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CITIES = ["Paris", "Oslo", "Rome", "Lima"]


def _row(city: str) -> dict:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": city}}}
    return {
        "messages": [
            {"role": "system", "content": "You answer with tools."},
            {"role": "user", "content": f"Weather in {city}?"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            {"role": "assistant", "content": f"Sunny in {city}."},
        ],
        "tools": [WEATHER],
    }


@pytest.fixture(scope="module")
def chatml_model(tmp_path_factory) -> Path:
    """A random-init tiny Llama whose tokenizer has <|im_start|>/<|im_end|> and a template without tools."""
    from trainteam.trainers.training.config import ModelSpec
    from trainteam.trainers.training.models import build_model

    folder = tmp_path_factory.mktemp("chatml")
    texts = [json.dumps(_row(c)) + tool_call_text("get_weather", {"city": c}) for c in CITIES]
    tok = _tokenizer(texts + [Path(__file__).read_text()], vocab_size=700)
    tok.chat_template = CHATML
    model = build_model(ModelSpec(hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=1024), tok, seed=0)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    assert not renders_tool_calls(tok)  # the blocker: the model's own template drops the calls
    return folder


@pytest.fixture(scope="module")
def run(chatml_model, tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("ct-run")
    for name, cities in (("train.jsonl", CITIES * 4), ("heldout.jsonl", CITIES[:2])):
        (tmp / name).write_text("".join(json.dumps(_row(c)) + "\n" for c in cities))
    task = {
        "name": "tools",
        "model": {"path": str(chatml_model), "chat_template": "qwen2_5"},
        "data": {"path": "train.jsonl", "eval_path": "heldout.jsonl"},
        "stages": ["sft"],
        "training": {
            "sft": {"max_steps": 4, "per_device_train_batch_size": 4, "learning_rate": 1e-3, "max_length": 512}
        },
        "gates": {"sft": {"metric": "heldout_loss", "max": 50.0}},
        "eval": {"max_new_tokens": 6},
        "curation": {"near_dedup": None},
        "budget": {"max_wall_minutes": 10},
        "require_approval": [],
    }
    (tmp / "task.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    checked = subprocess.run(
        CLI + ["validate", "task.yaml"], cwd=tmp, env=ENV, capture_output=True, text=True, timeout=600
    )
    assert checked.returncode == 0, checked.stdout[-2000:] + checked.stderr[-2000:]
    assert "TRL's qwen2_5 chat template replaces the model's own" in checked.stdout, checked.stdout
    proc = subprocess.run(
        CLI + ["execute-workflow", "train_model", "--task", "task.yaml", "--yes", "--json"],
        cwd=tmp,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    return tmp, json.loads(proc.stdout[proc.stdout.index("{") :])


def test_the_template_renders_tools_and_calls_on_the_models_tokenizer(chatml_model):
    from trainteam.trainers.training.chat_templates import apply_chat_template
    from trainteam.trainers.training.tokenizer import load_tokenizer

    tok = load_tokenizer(chatml_model)
    note = apply_chat_template(tok, "qwen2_5")
    assert "qwen2_5" in note and renders_tool_calls(tok)
    text = tok.apply_chat_template(_row("Paris")["messages"], tools=[WEATHER], tokenize=False)
    assert text.startswith("<|im_start|>system\nYou answer with tools.\n\n# Tools")
    assert json.dumps(WEATHER) in text  # the schema, in the system turn
    assert '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>' in text
    assert "<tool_response>\nsunny\n</tool_response>" in text


def test_a_template_the_vocabulary_cannot_write_or_an_unknown_name_is_refused(chatml_model):
    from trainteam.trainers.training.chat_templates import apply_chat_template
    from trainteam.trainers.training.tokenizer import load_tokenizer

    tok = load_tokenizer(chatml_model)
    with pytest.raises(BadInput, match=r"model.chat_template: TRL's llama3_1 chat template needs the tokens"):
        apply_chat_template(tok, "llama3_1")
    with pytest.raises(BadInput, match=r"model.chat_template: 'hermes' is not a chat template TRL ships"):
        apply_chat_template(tok, "hermes")


def test_the_checkpoint_carries_the_template_and_its_served_calls_parse(run):
    from trainteam.trainers.serving.endpoint import ChatModel, ChatServer
    from trainteam.trainers.serving.tool_calls import ToolSet, parse_output
    from trainteam.trainers.training.chat_templates import template_text
    from trainteam.trainers.training.tokenizer import load_tokenizer

    tmp, result = run
    assert result["status"] == "completed", result
    listed = subprocess.run(
        CLI + ["models", "list", "--json"], cwd=tmp, env=ENV, capture_output=True, text=True, timeout=600
    )
    (record,) = json.loads(listed.stdout)
    folder = Path(record["path"])
    assert (folder / "chat_template.jinja").read_text() == template_text("qwen2_5")[0]
    tok = load_tokenizer(folder)
    assert renders_tool_calls(tok)
    prefix = tok.apply_chat_template(
        _row("Oslo")["messages"][:2], tools=[WEATHER], tokenize=False, add_generation_prompt=True
    )
    out = tool_call_text("get_weather", {"city": "Oslo"}) + "<|im_end|>"
    content, calls = parse_output(tok, out, out, prefix, ToolSet(tools=[WEATHER], parse=True))
    assert not content and calls[0]["function"]["name"] == "get_weather"
    assert json.loads(calls[0]["function"]["arguments"]) == {"city": "Oslo"}
    with ChatServer(ChatModel(folder, "m-ct", max_new_tokens=8), port=0) as srv:  # the served checkpoint answers
        from openai import OpenAI

        client = OpenAI(base_url=srv.base_url, api_key="local", max_retries=0, timeout=600)
        resp = client.chat.completions.create(
            model="m-ct", messages=_row("Oslo")["messages"][:2], tools=[WEATHER], temperature=0
        )
        assert resp.usage.prompt_tokens == len(tok(prefix, add_special_tokens=False)["input_ids"])
