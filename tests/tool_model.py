"""A tiny real model that answers with tool calls: a Llama from ``trainers.models`` with a ChatML
tokenizer whose chat template renders tools (Hermes style, as SmolLM2/Qwen ship), trained for a few
dozen steps on fixed conversations whose answers are ``<tool_call>`` turns, so that greedy decoding
reproduces them. Imported by name (tests/conftest.py puts this folder on sys.path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

# ChatML with tools: the tool schemas in the system turn, an assistant's calls as
# <tool_call>{"name": ..., "arguments": {...}}</tool_call>, a tool's result as a <tool_response> turn.
HERMES_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{%- if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}{% endif %}\n"
    "# Tools\n<tools>\n{%- for tool in tools %}\n{{ tool | tojson }}{%- endfor %}\n</tools>\n"
    'Call a tool as <tool_call>{"name": NAME, "arguments": ARGS}</tool_call><|im_end|>\n'
    "{%- elif messages[0]['role'] == 'system' %}<|im_start|>system\n{{ messages[0]['content'] }}<|im_end|>\n"
    "{%- endif %}"
    "{%- for m in messages %}"
    "{%- if m['role'] == 'tool' %}\n<|im_start|>user\n<tool_response>\n{{ m['content'] }}\n</tool_response><|im_end|>"
    "{%- elif m['role'] == 'assistant' %}\n<|im_start|>assistant\n{{ m['content'] or '' }}"
    "{%- for tc in m.get('tool_calls') or [] %}<tool_call>\n"
    "{\"name\": \"{{ tc['function']['name'] }}\", \"arguments\": {{ tc['function']['arguments'] | tojson }}}"
    "\n</tool_call>{%- endfor %}<|im_end|>"
    "{%- elif m['role'] != 'system' %}\n<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}\n<|im_start|>assistant\n{% endif %}"
)


def tool_call_text(name: str, arguments: dict[str, Any]) -> str:
    """The answer the model is trained to give: one Hermes tool call (then <|im_end|>)."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _tokenizer(texts: list[str], vocab_size: int = 600):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<pad>", "<unk>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        eos_token="<|im_end|>",
        unk_token="<unk>",
        additional_special_tokens=["<|im_start|>"],
        padding_side="left",
    )
    fast.chat_template = HERMES_TEMPLATE
    return fast


def train_tool_model(
    folder: Path,
    examples: list[tuple[list[dict], list[dict] | None, str]],
    *,
    steps: int = 100,
    lr: float = 3e-3,
    vocab_size: int = 600,
    seed: int = 0,
) -> Path:
    """Train a fresh tiny Llama on ``(messages, tools, answer)`` examples (loss on the answer and its
    <|im_end|>) and save it with its tokenizer to ``folder``."""
    import torch

    from trainteam.trainers.serving.tool_calls import template_messages
    from trainteam.trainers.training.config import ModelSpec
    from trainteam.trainers.training.models import build_model

    tok = _tokenizer([HERMES_TEMPLATE] + [json.dumps([m, t]) + a for m, t, a in examples], vocab_size)
    prompts = [
        tok.apply_chat_template(template_messages(m), tools=t, tokenize=False, add_generation_prompt=True)
        for m, t, _ in examples
    ]
    rows = []
    for prompt, (_, _, answer) in zip(prompts, examples, strict=True):
        p = tok(prompt, add_special_tokens=False)["input_ids"]
        a = tok(answer + "<|im_end|>", add_special_tokens=False)["input_ids"]
        rows.append((torch.tensor([p + a]), torch.tensor([[-100] * len(p) + a])))
    longest = max(r[0].shape[1] for r in rows)
    spec = ModelSpec(hidden_size=64, num_layers=2, num_heads=4, max_position_embeddings=max(256, longest + 128))
    model = build_model(spec, tok, seed=seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    model.train()
    for i in range(steps):
        ids, labels = rows[i % len(rows)]
        model(input_ids=ids, labels=labels).loss.backward()
        opt.step()
        opt.zero_grad()
    model.eval()
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder
