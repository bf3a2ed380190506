"""An Ollama ``Modelfile`` from a ``TurnFormat``: the TEMPLATE in Go's text/template, the stops, the SYSTEM.

Written by hand by necessity: no well-kept library converts Jinja chat templates to Go templates, so the
Jinja template is first reduced to fixed text around each turn (``turn_format.py``, checked byte for byte)
and that text is written here into the one loop every Ollama chat template has: over ``.Messages``, each
message's prefix, ``.Content`` and suffix, and the generation prompt after the last message unless it is the
assistant's (an assistant message last is left open, without its end of turn, as Ollama's own templates do).
The default system message becomes ``SYSTEM``: Ollama puts it first when a request has no system message,
so the TEMPLATE needs none. Template text is written as it is where Go and the Modelfile's reader leave it
untouched, and as a Go string literal action (``{{ "..." }}``) where not: text holding ``{{``, quotes,
non-ASCII or control characters, and the whitespace at a piece's edges (so the layout's ``{{-`` trims
never eat it). A Modelfile value has no escapes; ``read_modelfile`` reads a file by the rules of Ollama's
parser, and ``build_modelfile`` reads its own output back before returning it.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from trainteam.core.errors import BadInput
from trainteam.trainers.export.turn_format import FIX, TurnCheck, TurnFormat, verified_turn_format

# The commands Ollama's parser knows.
COMMANDS = frozenset("from license template system adapter draft renderer parser parameter message requires".split())
_GO_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_EDGES = re.compile(  # the whitespace a ``{{-`` or ``-}}`` trim would take, at each edge
    r"\A([ \t\r\n]*)(.*?)([ \t\r\n]*)\Z", re.DOTALL
)
_COMMAND = re.compile(r"([A-Za-z]+)[ \t]")
_PARAMETER = re.compile(r"([A-Za-z0-9_]+)[ \t]")


class Modelfile(BaseModel):
    """An Ollama Modelfile and the parts it was made of."""

    model_config = ConfigDict(frozen=True)

    text: str
    template: str  # Go text/template over Ollama's ``.Messages``
    stops: tuple[str, ...]
    system: str | None  # the default system message (``SYSTEM``), if the chat template has one
    gguf_name: str
    check: TurnCheck | None = None  # the turn format's check against the chat template, when made from one

    @property
    def check_line(self) -> str:
        """One line on how the Modelfile's prompt format was checked."""
        if self.check is None:
            return "Modelfile: written from a given turn format, not checked against a chat template"
        return (
            f"Modelfile: {self.check.identical} of {self.check.conversations} sample conversations render "
            "byte-identical through the chat template and through the Modelfile's turn format"
        )


def go_string(text: str) -> str:
    """``text`` as a Go interpreted string literal, in ASCII."""
    out = []
    for ch in text:
        if ch in _GO_ESCAPES:
            out.append(_GO_ESCAPES[ch])
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _plain(core: str) -> bool:
    """Whether template text can stand as it is: printable ASCII and newlines, no ``{{`` (nor a ``{`` that an
    action's ``{{`` would follow), no quote (so no line of the Modelfile's TEMPLATE ends its ``\"\"\"``)."""
    return (
        all(" " <= ch <= "~" or ch == "\n" for ch in core)
        and "{{" not in core
        and not core.endswith("{")
        and '"' not in core
    )


def go_text(text: str) -> str:
    """Literal template text: as it is where safe, otherwise (and its whitespace edges) as string actions."""
    match = _EDGES.match(text)
    assert match is not None  # the pattern matches any text
    lead, core, tail = match.groups()
    parts = [f"{{{{ {go_string(lead)} }}}}" if lead else ""]
    parts.append(core if _plain(core) else f"{{{{ {go_string(core)} }}}}" if core else "")
    parts.append(f"{{{{ {go_string(tail)} }}}}" if tail else "")
    return "".join(parts)


def go_template(fmt: TurnFormat, write_bos: bool = True) -> str:
    """The Ollama TEMPLATE writing what ``fmt`` writes. ``write_bos=False`` leaves the BOS out, for a GGUF
    whose tokenizer adds it itself (``tokenizer.ggml.add_bos_token``), so it is not written twice."""
    s, u, a = fmt.system, fmt.user, fmt.assistant
    lines = [
        go_text(fmt.bos) if write_bos else "",
        "{{- range $i, $_ := .Messages }}",
        "{{- $last := eq (len (slice $.Messages $i)) 1 }}",
        f'{{{{- if eq .Role "system" }}}}{go_text(s.prefix)}{{{{ .Content }}}}{go_text(s.suffix)}',
        f'{{{{- else if eq .Role "user" }}}}{go_text(u.prefix)}{{{{ .Content }}}}{go_text(u.suffix)}',
        f'{{{{- else if eq .Role "assistant" }}}}{go_text(a.prefix)}{{{{ .Content }}}}'
        f"{{{{ if not $last }}}}{go_text(a.suffix)}{{{{ end }}}}",
        "{{- end }}",
        f'{{{{- if and $last (ne .Role "assistant") }}}}{go_text(fmt.generation_prompt)}{{{{ end }}}}',
        "{{- end }}",
    ]
    return "\n".join(line for line in lines if line)


def _unquote(value: str) -> tuple[bool, str]:
    """Ollama's reading of a value: ``\"\"\"...\"\"\"`` or ``"..."`` stripped of its quotes (no escapes), else as is;
    False while a quote is still open."""
    for quote in ('"""', '"'):
        if value.startswith(quote):
            closed = len(value) >= 2 * len(quote) and value.endswith(quote)
            return closed, value[len(quote) : len(value) - len(quote)] if closed else ""
    return True, value


def _read_value(text: str, at: int) -> tuple[str, int]:
    """A value from ``at``: it ends at the first line end where it is whole; unprintable characters other
    than tabs and line ends are dropped, as Ollama's parser drops them."""
    kept: list[str] = []
    while at < len(text):
        ch = text[at]
        at += 1
        if ch in "\r\n":
            closed, value = _unquote("".join(kept).strip())
            if closed:
                return value, at
            kept.append(ch)
        elif ch in " \t" or ch.isprintable():
            kept.append(ch)
    closed, value = _unquote("".join(kept).strip())
    if not closed:
        raise BadInput("Modelfile: a quoted value is never closed")
    return value, at


def read_modelfile(text: str) -> list[tuple[str, str]]:
    """The (command, value) pairs Ollama reads from a Modelfile (``parameter stop`` as ``("stop", ...)``)."""
    commands, at = [], 0
    while at < len(text):
        if text[at] in " \t\r\n":
            at += 1
        elif text[at] == "#":
            at = text.find("\n", at) + 1 or len(text)
        else:
            match = _COMMAND.match(text, at)
            if match is None or match.group(1).lower() not in COMMANDS:
                raise BadInput(f"Modelfile: not a command at {text[at : at + 20]!r}")
            name, at = match.group(1).lower(), match.end()
            if name == "parameter":
                parameter = _PARAMETER.match(text, at)
                if parameter is None:
                    raise BadInput(f"Modelfile: no parameter name at {text[at : at + 20]!r}")
                name, at = parameter.group(1), parameter.end()
            value, at = _read_value(text, at)
            commands.append((name, value))
    return commands


def modelfile_value(value: str, what: str, quotes: tuple[str, ...] = ('"""', '"')) -> str:
    """``value`` quoted so that Ollama reads it back unchanged (a Modelfile has no escapes), or refused."""
    for quote in quotes:
        quoted = quote + value + quote
        try:
            if read_modelfile(f"SYSTEM {quoted}\n") == [("system", value)]:
                return quoted
        except BadInput:  # the value ended early and what followed is no command
            continue
    raise BadInput(f"ollama export: {what} {value[:60]!r} cannot be written in a Modelfile (no escapes there); {FIX}")


def _stops(fmt: TurnFormat) -> tuple[str, ...]:
    candidates = [*fmt.end_of_turn, *([fmt.eos_token] if fmt.eos_token else [])]
    return tuple(dict.fromkeys(stop for stop in candidates if stop))


def build_modelfile(fmt: TurnFormat, gguf_name: str, write_bos: bool = True) -> Modelfile:
    """The Modelfile for ``fmt`` beside the GGUF file ``gguf_name`` (``FROM ./<gguf_name>``), read back once
    by Ollama's rules before it is returned."""
    if not gguf_name or "/" in gguf_name or "\\" in gguf_name or gguf_name != gguf_name.strip() or '"' in gguf_name:
        raise BadInput(f"ollama export: {gguf_name!r} is not a plain file name for the Modelfile's FROM")
    template, stops = go_template(fmt, write_bos=write_bos), _stops(fmt)
    lines = ["# Written by trainteam from the model's chat template.", f"FROM ./{gguf_name}"]
    lines.append(f"TEMPLATE {modelfile_value(template, 'the template')}")
    if fmt.default_system is not None:
        lines.append(f"SYSTEM {modelfile_value(fmt.default_system, 'the default system message')}")
    lines += ["PARAMETER stop " + modelfile_value(stop, "the stop", quotes=('"', '"""')) for stop in stops]
    text = "\n".join(lines) + "\n"
    expected = [("from", f"./{gguf_name}"), ("template", template)]
    expected += [("system", fmt.default_system)] if fmt.default_system is not None else []
    expected += [("stop", stop) for stop in stops]
    if read_modelfile(text) != expected:
        raise BadInput(f"ollama export: the Modelfile does not read back as written; {FIX}")
    return Modelfile(text=text, template=template, stops=stops, system=fmt.default_system, gguf_name=gguf_name)


def ollama_modelfile(tokenizer: Any, gguf_name: str, write_bos: bool = True) -> Modelfile:
    """The Modelfile for the tokenizer's chat template (probed and checked: ``verified_turn_format``) beside
    ``gguf_name``; a template it cannot describe is refused with ``BadInput``."""
    fmt, check = verified_turn_format(tokenizer)
    return build_modelfile(fmt, gguf_name, write_bos=write_bos).model_copy(update={"check": check})


def modelfile_text(fmt: TurnFormat, gguf_name: str, write_bos: bool = True) -> str:
    """The Modelfile's text (``build_modelfile(...).text``)."""
    return build_modelfile(fmt, gguf_name, write_bos=write_bos).text
