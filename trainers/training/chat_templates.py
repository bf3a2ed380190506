"""The chat template a run uses: a task's own (``model.chat_template``), or the one the model's tokenizer loads with.

SmolLM2-Instruct's ChatML ignores ``tools`` and renders an assistant turn's ``tool_calls`` as an empty
answer. A task names a template that does, and trainteam puts it on the model's tokenizer for the whole
run: token counts in the plan, curation, training, evaluation, and the tokenizer saved with every
checkpoint (so ``trainteam serve`` renders and parses the same format). The template is one TRL ships
(``trl/chat_templates``, the ones TRL itself recognises for response parsing), named without ``.jinja``,
or a ``.jinja`` file. ``qwen2_5`` is ChatML (``<|im_start|>``/``<|im_end|>``) with the tools as JSON in the
system turn, calls as ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` and results as
``<tool_response>`` turns: the Hermes shape vLLM's ``hermes`` parser and transformers' response parser
read. The template's special tokens must already be single tokens of the model's vocabulary (no
embedding is resized). A template need not write tool calls (a base model's turn format, such as TRL's
``gemma3``): its note says so, and rows that call tools are then refused at training (``methods/sft.py``).

Without a named template a run uses what ``load_tokenizer`` gives (``trainers/training/tokenizer.py``): the
model's own template, else its family's turn format when the vocabulary holds its tokens (a base Gemma),
else the plain format. ``template_choice`` says which, in one line, for ``validate`` and the run's summary.
"""

from __future__ import annotations

import re
from pathlib import Path

from trainteam.core.errors import BadInput
from trainteam.curation.formats import folder_prompt_format, prompt_format, renders_tool_calls
from trainteam.trainers.training.tokenizer import (
    TURN_FORMATS,
    TurnFormat,
    family_format,
    load_tokenizer,
    trl_template_path,
)

# The TRL-shipped templates that write tools and tool calls on a ChatML vocabulary.
CHATML_TOOL_TEMPLATES = ("qwen2_5", "qwen3", "qwen3_instruct_2507")
_SPECIAL = re.compile(r"<\|[a-z_]+\|>")


def template_text(value: str) -> tuple[str, str]:
    """The Jinja text of ``value`` (a TRL template's name or a ``.jinja`` file) and a label saying which."""
    if value.endswith(".jinja") or "/" in value:
        path = Path(value).expanduser()
        if not path.is_file():
            raise BadInput(f"model.chat_template: {value}: no such file")
        return path.read_text(encoding="utf-8"), f"the chat template in {path}"
    path = trl_template_path(value)
    if not path.is_file():
        raise BadInput(
            f"model.chat_template: {value!r} is not a chat template TRL ships (tool-calling ChatML ones: "
            f"{', '.join(CHATML_TOOL_TEMPLATES)}), nor a .jinja file"
        )
    return path.read_text(encoding="utf-8"), f"TRL's {value} chat template"


def apply_chat_template(tokenizer, value: str) -> str:
    """Put the template on ``tokenizer`` (in place) and say so in one line; a template whose special tokens
    the vocabulary lacks is refused by name. A template that closes turns with a family's end-of-turn token
    makes that token the EOS (``TURN_FORMATS``)."""
    text, label = template_text(value)
    vocab = tokenizer.get_vocab()
    wanted = set(_SPECIAL.findall(text)) | {t for f in TURN_FORMATS for t in (f.start, f.end) if t in text}
    missing = sorted(t for t in wanted if t not in vocab)
    if missing:
        raise BadInput(
            f"model.chat_template: {label} needs the tokens {', '.join(missing)}, which the model's vocabulary lacks"
        )
    tokenizer.chat_template = text
    _set_turn_end(tokenizer, text)
    _add_response_parser(tokenizer)
    tools = (
        "it writes the tools and tool calls"
        if renders_tool_calls(tokenizer)
        else "it writes no tool calls (rows that call tools are refused)"
    )
    end = tokenizer.eos_token
    return f"{label} replaces the model's own: {tools}; {end} ends an answer; saved with the checkpoints"


def _set_turn_end(tokenizer, text: str) -> None:
    """The EOS of a template that closes turns with a family's end token is that token; else the folder's own."""
    end = next((f.end for f in TURN_FORMATS if f.end in text), None)
    if end is not None:
        tokenizer.eos_token = end
    elif tokenizer.eos_token in {f.end for f in TURN_FORMATS}:  # set by load_tokenizer's family choice
        loaded = tokenizer.init_kwargs.get("eos_token")
        if loaded:
            tokenizer.eos_token = str(loaded)


def template_choice(folder: Path, tokenizer, named: str | None = None) -> str:
    """The chat template a run of the model in ``folder`` trains, evaluates and serves with, in one line;
    ``tokenizer`` is the folder's, as ``load_tokenizer`` gave it (with ``named`` applied when a task names one)."""
    if named:
        return apply_chat_template(tokenizer, named)
    if prompt_format(tokenizer) != "chat":
        return "no chat template: prompts are plain (bos + prompt, the answer closed by the EOS)"
    fmt = chosen_format(folder, tokenizer)
    return _chosen(fmt) if fmt is not None else "has a chat template: chat rows train and evaluate through it"


def chosen_format(folder: Path, tokenizer) -> TurnFormat | None:
    """The family turn format ``load_tokenizer`` chose for ``tokenizer``, the tokenizer of ``folder``, which
    carries no template of its own; None when the folder carries one or none was chosen."""
    if folder_prompt_format(folder) == "chat" or prompt_format(tokenizer) != "chat":
        return None
    return family_format(tokenizer)


def _chosen(fmt: TurnFormat) -> str:
    return (
        f"carries no chat template (a base model): trainteam trains, evaluates and serves it with "
        f"{fmt.describe()}, whose tokens its vocabulary holds; {fmt.end} is the EOS an answer ends with and "
        f"generation stops at; saved with every checkpoint (model.chat_template names another)"
    )


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
