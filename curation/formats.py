"""How a row becomes what a model reads, shared by training, evaluation, sampling and serving.

Evaluation must see exactly the context training saw: a missing leading separator took
addition accuracy from 91 % to 16.5 % here, and a chat model trained on ``bos + prompt``
but served through its chat template lost a fifth of its exact match. So there is one
place that says how a prompt is rendered:

- ``"chat"``: a tokenizer with a chat template renders a prompt with
  ``apply_chat_template(messages, add_generation_prompt=True)``; a plain ``prompt``
  string is one user turn (after a system turn when the row has ``system``). TRL's
  conversational path trains on the same rendering, so the prompt tokens it trains on
  are the ones evaluated, sampled and served.
- ``"plain"``: a model without a template (the project's own from-scratch tokenizers)
  reads ``bos + prompt`` and learns ``completion + eos``.

Rows come in four canonical shapes (``row_kind``): text, pair (prompt/completion), chat
(``messages``) and preference (prompt/chosen/rejected).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

RowKind = Literal["text", "pair", "chat", "preference"]
PromptFormat = Literal["plain", "chat"]
Message = dict[str, Any]
Prompt = str | list[Message]


def row_kind(rec: Mapping[str, Any]) -> RowKind:
    """Which of the canonical shapes a row has (preference before pair: both have ``prompt``)."""

    def has(*keys: str) -> bool:  # a column a table gives every row may hold None in this one
        return all(rec.get(k) is not None for k in keys)

    if has("chosen", "rejected"):
        return "preference"
    if has("messages"):
        return "chat"
    if has("prompt", "completion"):
        return "pair"
    if has("text"):
        return "text"
    raise ValueError(f"not a text, prompt/completion, messages or chosen/rejected row: {sorted(rec)}")


def prompt_format(tokenizer) -> PromptFormat:
    """``"chat"`` when the tokenizer carries a chat template, else ``"plain"``."""
    return "chat" if getattr(tokenizer, "chat_template", None) else "plain"


_PROBE_TOOL = "probe_tool_b7e1"


def renders_tool_calls(tokenizer) -> bool:
    """Whether the tokenizer's chat template writes an assistant turn's tool calls. A template
    without them (SmolLM2-Instruct's, a plain model's ``bos + prompt``) renders such a turn as an
    empty answer, which a model would then learn."""
    if prompt_format(tokenizer) != "chat":
        return False
    probe = [
        {"role": "user", "content": "x"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"type": "function", "function": {"name": _PROBE_TOOL, "arguments": {}}}],
        },
    ]
    try:
        return _PROBE_TOOL in tokenizer.apply_chat_template(probe, tokenize=False)
    except Exception:  # a template that raises on tool calls (jinja errors, raise_exception) renders none
        return False


def folder_prompt_format(folder) -> PromptFormat:
    """The format of a saved model folder, read from its tokenizer files without loading them:
    ``"chat"`` when it carries a chat template (``chat_template.jinja``, or the template inside
    ``tokenizer_config.json``). What a checkpoint and a registered model record as theirs."""
    folder = Path(folder)
    if (folder / "chat_template.jinja").is_file() or (folder / "chat_template.json").is_file():
        return "chat"
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text())
    except (OSError, ValueError):
        return "plain"
    return "chat" if isinstance(config, dict) and config.get("chat_template") else "plain"


# -- rows as conversations ---------------------------------------------------------------------


def _last_assistant(messages: Sequence[Message]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "assistant":
            return i
    raise ValueError("the conversation has no assistant turn to learn or check")


def clean_message(m: Mapping[str, Any]) -> Message:
    """A turn without the keys a table filled with None (a template tests ``tool_calls is defined``)."""
    return {k: v for k, v in m.items() if v is not None}


def as_messages(prompt: Prompt, system: str | None = None) -> list[Message]:
    """A prompt as chat turns: a string is one user turn, after ``system`` when given."""
    if isinstance(prompt, str):
        turns = [{"role": "user", "content": prompt}]
        return ([{"role": "system", "content": system}] if system else []) + turns
    return [clean_message(m) for m in prompt]


def example(rec: Mapping[str, Any]) -> tuple[Prompt, str]:
    """``(prompt, reference)`` of a pair or chat row: the chat prompt is every turn before the
    last assistant turn, whose content is the reference answer."""
    if rec.get("messages") is not None:
        msgs = [clean_message(m) for m in rec["messages"]]
        i = _last_assistant(msgs)
        return msgs[:i], str(msgs[i].get("content") or "")
    return rec["prompt"], str(rec["completion"])


def turns(rec: Mapping[str, Any]) -> list[tuple[list[Message], Message]]:
    """Every assistant turn of a chat row with the turns before it, so each assistant reply
    is learned once, in its own context (a row with k replies gives k prompt/completion pairs)."""
    msgs = [clean_message(m) for m in rec["messages"]]
    return [(msgs[:i], m) for i, m in enumerate(msgs) if m.get("role") == "assistant"]


def chat_pair(rec: Mapping[str, Any]) -> tuple[list[Message], list[Message]]:
    """A pair row as conversational prompt/completion turns (TRL's conversational format)."""
    return as_messages(rec["prompt"], rec.get("system")), [{"role": "assistant", "content": str(rec["completion"])}]


def completion_content(completion: Any) -> str:
    """The text of a completion: a string, or TRL's conversational ``[{"role": "assistant", ...}]``."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence):
        return "".join(
            completion_content(c)
            for c in completion
            if not isinstance(c, Mapping) or c.get("role", "assistant") == "assistant"
        )
    return str(completion)


def _plain(prompt: Prompt) -> str:
    """A chat prompt on a model without a template: the turns' contents, one per line."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content") or "") for m in prompt)


# -- rendering -----------------------------------------------------------------------------------


def prompt_text(
    tokenizer, prompt: Prompt, fmt: PromptFormat = "plain", *, system: str | None = None, tools: list | None = None
) -> str:
    """The context a model is given: ``</s>12+34=`` (plain), or the chat template's rendering
    of the turns up to the assistant's header (chat)."""
    if fmt == "chat":
        return tokenizer.apply_chat_template(
            as_messages(prompt, system), tools=tools, tokenize=False, add_generation_prompt=True
        )
    sep = tokenizer.bos_token or tokenizer.eos_token or ""
    return sep + _plain(as_messages(prompt, system) if system else prompt)


def prompt_ids(
    tokenizer, prompt: Prompt, fmt: PromptFormat = "plain", *, system: str | None = None, tools: list | None = None
) -> list[int]:
    """Token ids of ``prompt_text``; chat prompts are tokenized by the template itself, as TRL does."""
    if fmt == "chat":
        out = tokenizer.apply_chat_template(
            as_messages(prompt, system), tools=tools, tokenize=True, add_generation_prompt=True, return_dict=True
        )
        return list(out["input_ids"])
    return tokenizer(prompt_text(tokenizer, prompt, system=system), add_special_tokens=False)["input_ids"]


def completion_text(tokenizer, completion: str) -> str:
    """The plain target: the answer closed by EOS (``46</s>``), so generation knows where to stop."""
    return completion + (tokenizer.eos_token or "")


def example_ids(tokenizer, rec: Mapping[str, Any], fmt: PromptFormat) -> tuple[list[int], list[int]]:
    """``(prompt ids, prompt+answer ids)`` of a pair or chat row, as training tokenizes it; the
    answer's tokens are the tail after the prompt (the loss counts only those)."""
    prompt, reference = example(rec)
    system, tools = rec.get("system"), rec.get("tools")
    if fmt == "chat":
        p = prompt_ids(tokenizer, prompt, fmt, system=system, tools=tools)
        full = tokenizer.apply_chat_template(
            as_messages(prompt, system) + [{"role": "assistant", "content": reference}],
            tools=tools,
            tokenize=True,
            return_dict=True,
        )["input_ids"]
        return p, list(full)
    text = prompt_text(tokenizer, prompt, system=system)
    p = tokenizer(text, add_special_tokens=False)["input_ids"]
    return p, tokenizer(text + completion_text(tokenizer, reference), add_special_tokens=False)["input_ids"]


def query(rec: Mapping[str, Any]) -> Prompt:
    """What a row asks, as ``greedy_generations`` and serving take it: its prompt, with the
    row's ``system`` turn in front when it has one."""
    prompt, _ = example(rec)
    return as_messages(prompt, rec["system"]) if rec.get("system") else prompt


def text_of(tokenizer, rec: Mapping[str, Any], fmt: PromptFormat) -> str:
    """A whole row as one text to continue-pretrain on: text as is; a pair or a conversation
    rendered as training renders it (the chat template, or ``bos + prompt`` + ``answer + eos``)."""
    kind = row_kind(rec)
    if kind == "text":
        return rec["text"]
    if fmt == "chat":
        msgs = [clean_message(m) for m in rec["messages"]] if kind == "chat" else sum(chat_pair(rec), [])
        return tokenizer.apply_chat_template(msgs, tools=rec.get("tools"), tokenize=False)
    prompt, reference = example(rec)
    return prompt_text(tokenizer, prompt, system=rec.get("system")) + completion_text(tokenizer, reference)
