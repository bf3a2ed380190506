"""A task's own chat template for a model whose template does not write tools (``model.chat_template``).

SmolLM2-Instruct's ChatML ignores ``tools`` and renders an assistant turn's ``tool_calls`` as an empty
answer. A task names a template that does, and trainteam puts it on the model's tokenizer for the whole
run: token counts in the plan, curation, training, evaluation, and the tokenizer saved with every
checkpoint (so ``trainteam serve`` renders and parses the same format). The template is one TRL ships
(``trl/chat_templates``, the ones TRL itself recognises for response parsing), named without ``.jinja``,
or a ``.jinja`` file. ``qwen2_5`` is ChatML (``<|im_start|>``/``<|im_end|>``) with the tools as JSON in the
system turn, calls as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` and results as
``<tool_response>`` turns: the Hermes shape vLLM's ``hermes`` parser and transformers' response parser
read. The template's special tokens must already be single tokens of the model's vocabulary (no
embedding is resized).
"""

from __future__ import annotations

import re
from pathlib import Path

from trainteam.core.errors import BadInput
from trainteam.curation.formats import renders_tool_calls
from trainteam.trainers.training.tokenizer import load_tokenizer

# The TRL-shipped templates that write tools and tool calls on a ChatML vocabulary.
CHATML_TOOL_TEMPLATES = ("qwen2_5", "qwen3", "qwen3_instruct_2507")
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")


def _trl_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise BadInput(
            "model.chat_template: TRL is not installed (its chat_templates folder holds the named templates)"
        )
    return Path(list(spec.submodule_search_locations)[0]) / "chat_templates"


def template_text(value: str) -> tuple[str, str]:
    """The Jinja text of ``value`` (a TRL template's name or a ``.jinja`` file) and a label saying which."""
    if value.endswith(".jinja") or "/" in value:
        path = Path(value).expanduser()
        if not path.is_file():
            raise BadInput(f"model.chat_template: {value}: no such file")
        return path.read_text(encoding="utf-8"), f"the chat template in {path}"
    path = _trl_dir() / f"{value}.jinja"
    if not path.is_file():
        raise BadInput(
            f"model.chat_template: {value!r} is not a chat template TRL ships (tool-calling ChatML ones: "
            f"{', '.join(CHATML_TOOL_TEMPLATES)}), nor a .jinja file"
        )
    return path.read_text(encoding="utf-8"), f"TRL's {value} chat template"


def apply_chat_template(tokenizer, value: str) -> str:
    """Put the template on ``tokenizer`` (in place) and say so in one line; a template whose special tokens
    the vocabulary lacks, or that does not write tool calls, is refused by name."""
    text, label = template_text(value)
    vocab = tokenizer.get_vocab()
    missing = sorted({t for t in _SPECIAL.findall(text) if t not in vocab})
    if missing:
        raise BadInput(
            f"model.chat_template: {label} needs the tokens {', '.join(missing)}, which the model's vocabulary lacks"
        )
    tokenizer.chat_template = text
    _add_response_parser(tokenizer)
    if not renders_tool_calls(tokenizer):
        raise BadInput(f"model.chat_template: {label} does not write an assistant turn's tool calls")
    return f"{label} replaces the model's own: it writes the tools and tool calls, and is saved with the checkpoints"


def _add_response_parser(tokenizer) -> None:
    """TRL's response template for the templates it recognises (what ``parse_response`` reads); others are
    parsed by the server's Hermes fallback."""
    try:
        from trl.chat_template_utils import add_response_schema

        add_response_schema(tokenizer)
    except ValueError:  # not one of TRL's templates
        pass


def save_tokenizer_with_template(src: Path, value: str, out_dir: Path) -> tuple[Path, str]:
    """``src``'s tokenizer with the template applied, saved to ``out_dir`` (chat_template.jinja included)."""
    tok = load_tokenizer(src)
    note = apply_chat_template(tok, value)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok.save_pretrained(str(out_dir))
    return out_dir, note
