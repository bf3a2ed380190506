"""A chat template described as plain text around each turn, found by probing it and then checked.

A Jinja chat template (``tokenizer.chat_template``) is a program; an Ollama Modelfile needs the same
prompt from a much smaller language. Most instruct templates only write, for each message, a fixed text
before and after its content: ``TurnFormat`` holds those texts, the generation prompt, the default system
message, a BOS written once at the start and the end-of-turn markers. ``probe_turn_format`` finds them by
rendering conversations whose contents are unique marker strings and cutting the output at the markers;
``check_turn_format`` then renders ``sample_conversations`` through the template and through the format
and compares the two byte for byte. A template the format cannot express (none at all, one that writes
the first user turn differently, one that refuses a system message or changes a message's text) ends in
``BadInput``: such a model is exported as GGUF or a Hugging Face folder, whose own template travels with it.

transformers is never imported here: the tokenizer is passed in.
"""

from __future__ import annotations

import random
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainteam.core.errors import BadInput

ROLES = ("system", "user", "assistant")
FIX = "export --format gguf or hf instead (they carry the model's own chat template)"
# Marker contents: letters and digits only, so no template escapes or trims them.
_MARK = "TtProbe{}Mark"


class RoleText(BaseModel):
    """What a role's turn writes before and after the message's content."""

    model_config = ConfigDict(frozen=True)

    prefix: str
    suffix: str


class TurnFormat(BaseModel):
    """A chat template as fixed text around each turn (what a Modelfile can say)."""

    model_config = ConfigDict(frozen=True)

    bos: str = ""  # written once, before the first turn (Llama 3's ``<|begin_of_text|>``)
    system: RoleText
    user: RoleText
    assistant: RoleText
    generation_prompt: str  # what ``add_generation_prompt=True`` appends
    default_system: str | None = None  # the system message the template writes when a conversation has none
    end_of_turn: tuple[str, ...] = ()  # the marker(s) ending an assistant turn, e.g. ``<|im_end|>``
    eos_token: str | None = None

    def role(self, name: str) -> RoleText:
        if name not in ROLES:
            raise BadInput(f"ollama export: the role {name!r} has no turn format (only {', '.join(ROLES)})")
        text: RoleText = getattr(self, name)
        return text

    def render(self, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The prompt this format writes: the default system message first when the conversation has no
        system message (as the template does, and as Ollama does with a Modelfile's SYSTEM)."""
        if self.default_system is not None and (not messages or messages[0]["role"] != "system"):
            messages = [{"role": "system", "content": self.default_system}, *messages]
        parts = [self.bos]
        for message in messages:
            text = self.role(message["role"])
            parts += [text.prefix, message["content"], text.suffix]
        if add_generation_prompt:
            parts.append(self.generation_prompt)
        return "".join(parts)


class TurnCheck(BaseModel):
    """How many conversations the template and the format render to the same bytes."""

    model_config = ConfigDict(frozen=True)

    conversations: int
    identical: int
    first_mismatch: str | None = None  # which conversation, where, and the two texts there

    @property
    def ok(self) -> bool:
        return self.identical == self.conversations


def _refuse(problem: str) -> BadInput:
    return BadInput(f"ollama export: {problem}; {FIX}")


def render_template(tokenizer: Any, messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """``tokenizer.apply_chat_template`` as text; a template that fails or writes no text is refused."""
    if not getattr(tokenizer, "chat_template", None):
        raise _refuse("the tokenizer has no chat template, so there is no prompt format to write")
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    except Exception as exc:  # jinja2's TemplateError from raise_exception, or any error in the template
        roles = ", ".join(m["role"] for m in messages)
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:160]
        raise _refuse(f"the chat template fails on a conversation of {roles} ({first_line})") from exc
    if not isinstance(text, str):
        raise _refuse(f"the chat template rendered a {type(text).__name__}, not text")
    return text


def _marked(roles: tuple[str, ...]) -> list[dict[str, str]]:
    return [{"role": role, "content": _MARK.format(i)} for i, role in enumerate(roles)]


def _cut(text: str, messages: list[dict[str, str]]) -> list[str]:
    """The text between the marker contents: one piece more than there are messages."""
    pieces, rest = [], text
    for message in messages:
        marker = message["content"]
        if text.count(marker) != 1:
            raise _refuse("the chat template does not write each message's text exactly once")
        head, _, rest = rest.partition(marker)
        pieces.append(head)
    return [*pieces, rest]


def _without_head(text: str, head: str, what: str) -> str:
    if not text.startswith(head):
        raise _refuse(f"the chat template writes {what} differently from the other turns")
    return text[len(head) :]


def _without_tail(text: str, tail: str, what: str) -> str:
    if not text.endswith(tail):
        raise _refuse(f"the chat template writes {what} differently from the other turns")
    return text[: len(text) - len(tail)]


def _turn_texts(tokenizer: Any) -> tuple[RoleText, RoleText, str, str, str]:
    """User and assistant texts, the system suffix, ``bos + system prefix`` and the generation prompt."""
    roles = ("system", "user", "assistant", "user", "assistant", "user")
    talk = _marked(roles)
    p = _cut(render_template(tokenizer, talk, add_generation_prompt=True), talk)
    user_suffix = _cut(render_template(tokenizer, talk, add_generation_prompt=False), talk)[-1]
    assistant_suffix = _cut(render_template(tokenizer, talk[:5], add_generation_prompt=False), talk[:5])[-1]
    if p[5] != p[3] or p[4] != p[2]:
        raise _refuse("the chat template writes the same role differently from one turn to the next")
    user_prefix = _without_head(p[3], assistant_suffix, "the end of an assistant turn")
    assistant_prefix = _without_head(p[2], user_suffix, "the end of a user turn")
    system_suffix = _without_tail(p[1], user_prefix, "the first user turn after a system message")
    generation_prompt = _without_head(p[6], user_suffix, "the end of the last user turn")
    return (
        RoleText(prefix=user_prefix, suffix=user_suffix),
        RoleText(prefix=assistant_prefix, suffix=assistant_suffix),
        system_suffix,
        p[0],
        generation_prompt,
    )


def _start_without_system(
    tokenizer: Any, user_prefix: str, system_head: str, system_suffix: str
) -> tuple[str, str | None]:
    """The BOS and the default system message, from a conversation that has no system message."""
    talk = _marked(("user", "assistant", "user"))
    head = _cut(render_template(tokenizer, talk, add_generation_prompt=False), talk)[0]
    start = _without_tail(head, user_prefix, "the first user turn (with no system message before it)")
    if system_head.startswith(start):  # nothing inserted: what comes first is the BOS
        return start, None
    long_enough = len(start) >= len(system_head) + len(system_suffix)
    if long_enough and start.startswith(system_head) and start.endswith(system_suffix):
        default = start[len(system_head) : len(start) - len(system_suffix)]
        bos = getattr(tokenizer, "bos_token", None) or ""
        full = render_template(tokenizer, [{"role": "user", "content": "x"}])
        return (bos if bos and system_head.startswith(bos) and full.count(bos) == 1 else ""), default
    raise _refuse("the chat template writes text before the first user turn that is neither a BOS nor a system turn")


def _special_tokens(tokenizer: Any) -> set[str]:
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    special = {token.content for token in decoder.values() if getattr(token, "special", False)}
    special |= set(getattr(tokenizer, "all_special_tokens", None) or ())
    return {token for token in special if isinstance(token, str) and token.strip()}


def _end_of_turn(tokenizer: Any, assistant_suffix: str) -> tuple[str, ...]:
    """The special tokens in an assistant turn's suffix, in order; else the suffix's own text."""
    found = sorted((assistant_suffix.find(t), t) for t in _special_tokens(tokenizer) if t in assistant_suffix)
    if found:
        return tuple(dict.fromkeys(token for _, token in found))
    return (assistant_suffix.strip(),) if assistant_suffix.strip() else ()


def probe_turn_format(tokenizer: Any) -> TurnFormat:
    """The tokenizer's chat template as a ``TurnFormat``, found by rendering marked conversations.
    Not yet checked: ``verified_turn_format`` probes and checks."""
    user, assistant, system_suffix, system_head, generation_prompt = _turn_texts(tokenizer)
    bos, default_system = _start_without_system(tokenizer, user.prefix, system_head, system_suffix)
    eos = getattr(tokenizer, "eos_token", None)
    return TurnFormat(
        bos=bos,
        system=RoleText(prefix=system_head[len(bos) :], suffix=system_suffix),
        user=user,
        assistant=assistant,
        generation_prompt=generation_prompt,
        default_system=default_system,
        end_of_turn=_end_of_turn(tokenizer, assistant.suffix),
        eos_token=eos if isinstance(eos, str) and eos else None,
    )


_CONTENTS = (
    "Hello!",
    "What is 2 + 2?",
    "  leading and trailing spaces  ",
    "line one\nline two\n\nline four",
    "She said \"yes\" and 'no'.",
    "naïve café, 日本語, Ελληνικά, emoji 🙂",
    "braces {{ .System }} and {% raw %}{{ not jinja }}{% endraw %} and {{- .Content -}}",
    "a tab\there, a backslash \\ and a slash /",
    "\nstarts and ends with a newline\n",
    "<b>markup</b> & entities &amp; <|not_a_token|>",
    'ends with a quote"',
    "sum(x for x in range(10)) == 45",
)
_SYSTEMS = ("You are a careful assistant.", "Answer in one line.\nBe brief.", "  Système: réponds en français.  ")


def sample_conversations(n: int = 20, seed: int = 0) -> list[list[dict[str, str]]]:
    """``n`` deterministic tool-free conversations: every other one with a system message, 1 to 4 user
    turns (an assistant answer between them), ending on a user turn."""
    rng = random.Random(seed)
    conversations = []
    for i in range(n):
        messages = [{"role": "system", "content": rng.choice(_SYSTEMS)}] if i % 2 == 0 else []
        turns = 1 + i % 4
        for turn in range(turns):
            messages.append({"role": "user", "content": rng.choice(_CONTENTS)})
            if turn < turns - 1:
                messages.append({"role": "assistant", "content": rng.choice(_CONTENTS)})
        conversations.append(messages)
    return conversations


def first_difference(expected: str, got: str, context: int = 24) -> str:
    """Where two texts first differ, with a little of each around it, on one line."""
    at = next((i for i, (a, b) in enumerate(zip(expected, got, strict=False)) if a != b), min(len(expected), len(got)))
    start = max(0, at - context)
    return f"at character {at}: template {expected[start : at + context]!r}, format {got[start : at + context]!r}"


def check_turn_format(tokenizer: Any, fmt: TurnFormat, conversations: list[list[dict[str, str]]]) -> TurnCheck:
    """Each conversation rendered by the template and by ``fmt`` (generation prompt on), compared byte for byte."""
    identical, mismatch = 0, None
    for i, messages in enumerate(conversations):
        expected = render_template(tokenizer, messages, add_generation_prompt=True)
        got = fmt.render(messages, add_generation_prompt=True)
        if expected == got:
            identical += 1
        elif mismatch is None:
            mismatch = f"conversation {i} {first_difference(expected, got)}"
    return TurnCheck(conversations=len(conversations), identical=identical, first_mismatch=mismatch)


def verified_turn_format(tokenizer: Any, n: int = 20, seed: int = 0) -> tuple[TurnFormat, TurnCheck]:
    """The probed format and its check on ``sample_conversations(n, seed)``; any mismatch is refused."""
    fmt = probe_turn_format(tokenizer)
    check = check_turn_format(tokenizer, fmt, sample_conversations(n, seed))
    if not check.ok:
        raise _refuse(
            f"the chat template writes {check.conversations - check.identical} of {check.conversations} sample "
            f"conversations differently from fixed text around each turn ({check.first_mismatch})"
        )
    return fmt, check
