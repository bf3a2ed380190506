"""What words in a request name a model: a hub id, a family with its version, size and variant, a
model registered in the workspace, a closed model. Pure text: where a name is found is
``model_sources``' job.

Kinds of mention (``ModelName.kind``):

- ``path``: a folder or a hub id as written (``./models/x``, ``Qwen/Qwen2.5-0.5B-Instruct``);
- ``name``: a family and what follows it ("llama-3-8b", "Qwen2.5-0.5B-Instruct", "mistral 7b
  instruct", "SmolLM2-135M", "gpt2"); ``bare`` when it is only one of the architecture words
  trainteam builds from a config (llama, qwen2, gpt2) — "a tiny llama" describes a model to build,
  "fine-tune gpt2" names one to load;
- ``registered``: "the smol model I imported", "registered model smollm2", "model m-1a2b3c";
- ``closed``: a model whose weights are not published (GPT-4, Claude, Gemini): it cannot be trained.

A family word that is also a common word (phi, opt, yi, falcon, bloom, granite, mpt) names a model
only with a version or a size after it ("phi-3-mini", "opt-125m"). "tiny llama" (two words) is
trainteam's from-scratch size and a llama; "TinyLlama" (one word) is the released model.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

# family -> (regex of the family word, the architecture trainteam can build for it, needs a version or size)
FAMILIES: dict[str, tuple[str, str | None, bool]] = {
    "codellama": (r"code-?llama", "llama", False),
    "tinyllama": (r"tinyllama", "llama", False),
    "llama": (r"(?:meta-)?llama", "llama", False),
    "smollm": (r"smol-?lm", "llama", False),
    "qwen": (r"qwen", "qwen2", False),
    "gpt2": (r"(?:distil-?)?gpt-?2", "gpt2", False),
    "mistral": (r"mistral", None, False),
    "mixtral": (r"mixtral", None, False),
    "gemma": (r"(?:code)?gemma", None, False),
    "pythia": (r"pythia", None, False),
    "deepseek": (r"deepseek(?:-(?:coder|llm|math|moe|r1))?", None, False),
    "olmo": (r"olmo", None, False),
    "starcoder": (r"starcoder", None, False),
    "stablelm": (r"stablelm", None, False),
    "gpt-j": (r"gpt-?j", None, False),
    "gpt-neo": (r"gpt-?neox?", None, False),
    "phi": (r"phi", None, True),
    "opt": (r"opt", None, True),
    "yi": (r"yi", None, True),
    "falcon": (r"falcon", None, True),
    "bloom": (r"bloomz?", None, True),
    "granite": (r"granite", None, True),
    "mpt": (r"mpt", None, True),
}
# closed models: regex -> whose (their weights are not published)
CLOSED: dict[str, str] = {
    r"chat-?gpt|gpt-?(?:3(?:\.5)?|4(?:\.\d+)?(?:o|-?turbo)?|5(?:\.\d+)?)(?:-(?:mini|nano|turbo|pro))?"
    r"|o[134]-(?:mini|preview|pro)|(?:text-)?davinci(?:-\d+)?": "OpenAI",
    r"claude(?:[- ]?\d+(?:\.\d+)?)?(?:[- ](?:opus|sonnet|haiku|instant))?(?:[- ]?\d+(?:\.\d+)?)?": "Anthropic",
    r"gemini(?:[- ]?\d+(?:\.\d+)?)?(?:[- ](?:pro|flash|ultra|nano))?": "Google",
}
ARCH_WORDS = r"llama|qwen-?2?|gpt-?2"  # a mention of only one of these is ``bare``
_SIZE = r"\d+(?:\.\d+)?\s?[kmbt]\b|\d+x\d+(?:\.\d+)?b\b"
_VERSION = r"v?\d+(?:\.\d+)?(?![\d.]*\s?[kmbt]\b)(?!x\d)"
_NOT_VERSION = r"(?!\s+(?:transformer\s+)?(?:layers?|heads?|hidden|generations?|steps?|epochs?|minutes?|hours?)\b)"
_VARIANT = r"-(?:instruct|chat|it|base|hf|coder|code|math)\b|\s(?:instruct|chat)\b"
_TAIL = (
    rf"(?:-?{_VERSION}{_NOT_VERSION}|\s{_VERSION}{_NOT_VERSION}(?=[\s,.;:)!?]|$))?"
    rf"(?:[- ]?(?:{_SIZE})|-(?:mini|small|medium|large|xl)\b)?(?:{_VARIANT})*(?:-v\d+(?:\.\d+)*)?"
)
_FAMILY_RE = re.compile(
    r"(?<![\w/.\-])(?:"
    + "|".join(f"(?P<{k.replace('-', '_')}>{p})" for k, (p, _, _) in FAMILIES.items())
    + rf")(?P<tail>{_TAIL})(?![\w/])",
    re.IGNORECASE,
)
_CLOSED_RE = re.compile(r"(?<![\w/.\-])(?:" + "|".join(f"(?:{p})" for p in CLOSED) + r")(?![\w/])", re.IGNORECASE)
# a hub id (org/name) or a folder: one slash and no file suffix; ./, ../, / and ~ are always folders
HUB_WORDS = r"[A-Za-z][\w.\-]*/[A-Za-z0-9][\w.\-]*"
HUB_ID = rf"(?<![\w.\-~/])({HUB_WORDS})(?![\w/])"
_REGISTERED = (
    r"\b(?:the|my|our)\s+(?:([\w.\-]+)\s+)?model\s+(?:that\s+)?(?:I|we)(?:'ve|\s+have)?\s+(?:just\s+)?"
    r"(?:imported|registered)\b",
    r"\b(?:registered|imported)\s+model\s+[\"'`]?((?!(?:at|in|from|on|to|and|for|with|that|which)\b)[\w.\-]+)",
    r"\b(?:the|my|our)\s+(?:([\w.\-]+)\s+)?(?:imported|registered)\s+model\b",
    r"\bmodel\s+(m-[0-9a-f]{6,12})\b",
)


WAYS_OUT = (
    "give the model's folder (model.path: 'fine-tune the model in ./models/x'), import and register a GGUF file "
    "or a folder (`trainteam models import FILE.gguf --register --name N`, then 'fine-tune the model I imported'), "
    "or build one from scratch at a size the planner can fit (e.g. 'a tiny llama from scratch')"
)


class ModelName(BaseModel):
    """One mention of a model in a request, as written, and what the words carry."""

    words: str = Field(description="the request's words, as written")
    kind: Literal["path", "name", "registered", "closed"]
    start: int = 0
    family: str | None = None
    arch: str | None = Field(default=None, description="what trainteam builds from a config for this family")
    params: int | None = Field(default=None, description="the size the name carries (8B -> 8e9)")
    bare: bool = Field(default=False, description="only an architecture word: 'llama', 'qwen2', 'gpt2'")
    owner: str | None = Field(default=None, description="a closed model's maker")
    ref: str | None = Field(default=None, description="registered: the word naming it ('smol'), or None")

    @property
    def tokens(self) -> list[str]:
        return name_tokens(self.words)


def name_tokens(text: str) -> list[str]:
    """A model name as comparable tokens: lower case, split at separators and where letters meet
    a version number ("Qwen2.5-0.5B-Instruct" -> qwen, 2.5, 0.5b, instruct; "gpt2" -> gpt, 2)."""
    out: list[str] = []
    for part in re.split(r"[\s_\-/:]+", text.lower()):
        out += [t for t in re.split(r"(?<=[a-z])(?=\d)", part) if t]
    return out


def _params(size: str) -> int | None:
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s?([kmbt])", size.strip(" -").lower())
    if m is None:
        return None
    return int(float(m.group(1)) * {"k": 1e3, "m": 1e6, "b": 1e9, "t": 1e12}[m.group(2)])


def _family_mentions(text: str, taken: list[tuple[int, int]]) -> list[ModelName]:
    found = []
    for m in _FAMILY_RE.finditer(text):
        if any(a <= m.start() < b for a, b in taken):
            continue
        family = next(k for k in FAMILIES if m.group(k.replace("-", "_")))
        _, arch, needs_more = FAMILIES[family]
        tail = m.group("tail")
        if needs_more and not tail:
            continue
        size = re.search(r"(?<![\w.])(" + _SIZE + ")", tail, re.IGNORECASE)
        found.append(
            ModelName(
                words=m.group(0),
                kind="name",
                start=m.start(),
                family=family,
                arch=arch,
                params=_params(size.group(1)) if size else None,
                bare=re.fullmatch(ARCH_WORDS, m.group(0), re.IGNORECASE) is not None,
            )
        )
    return found


def hub_shaped(words: str) -> bool:
    """An org/name a model may go by: a name with a digit or a family word ("Qwen/Qwen2.5-0.5B",
    "openai-community/gpt2"), not "prompt/completion" or "and/or"."""
    name = words.rsplit("/", 1)[-1]
    return re.fullmatch(HUB_WORDS, words) is not None and (
        re.search(r"\d", name) is not None or _FAMILY_RE.search(re.sub(r"[-_]", " ", name)) is not None
    )


def find_names(text: str, paths: list[tuple[int, int]]) -> list[ModelName]:
    """The model mentions of ``text`` in order, outside the spans of ``paths`` (data files, the
    task's own name): hub ids, registered models, closed models and families. Registered and closed
    mentions take their words before a family does ("the llama model I imported" is registered)."""
    taken = list(paths)
    found: list[ModelName] = []
    for m in re.finditer(HUB_ID, text):
        if not any(a <= m.start() < b for a, b in taken) and hub_shaped(m.group(1)):
            found.append(ModelName(words=m.group(1), kind="path", start=m.start(1)))
            taken.append(m.span(1))
    for pattern in _REGISTERED:
        for m in re.finditer(pattern, text, re.IGNORECASE):
            if not any(a <= m.start() < b for a, b in taken):
                found.append(ModelName(words=m.group(0), kind="registered", start=m.start(), ref=m.group(1)))
                taken.append(m.span())
    for m in _CLOSED_RE.finditer(text):
        if not any(a <= m.start() < b for a, b in taken):
            owner = next(o for p, o in CLOSED.items() if re.fullmatch(p, m.group(0), re.IGNORECASE))
            found.append(ModelName(words=m.group(0), kind="closed", start=m.start(), owner=owner))
            taken.append(m.span())
    found += _family_mentions(text, taken)
    return sorted(found, key=lambda n: n.start)


def distinct(names: list[ModelName]) -> list[ModelName]:
    """One mention per model: a mention whose tokens another one's hold is the same model said again
    ("Qwen/Qwen2.5-0.5B-Instruct ... the qwen")."""
    out: list[ModelName] = []
    for n in sorted(names, key=lambda n: -len(n.tokens)):
        if not any(
            set(n.tokens) <= set(o.tokens) and (n.kind == o.kind or {n.kind, o.kind} == {"path", "name"}) for o in out
        ):
            out.append(n)
    return sorted(out, key=lambda n: n.start)


class ModelChoice(BaseModel):
    """The local folder a named model resolved to, and where it was found (stated in the plan)."""

    words: str = Field(description="the request's words, as written")
    path: Path
    source: Literal["folder", "registered", "hf_cache"]
    detail: str = Field(description="where it came from, in a few words")


def closed_refusal(name: ModelName) -> str:
    return (
        f"model: '{name.words}' is a closed model ({name.owner}'s weights are not published), so it cannot be "
        "trained here; fine-tune an open model you have locally (its folder, or `trainteam models import "
        "FILE.gguf --register`), or build one from scratch (e.g. 'a tiny llama from scratch')"
    )


def size_words(params: int) -> str:
    """8_000_000_000 -> '8B', 135_000_000 -> '135M'."""
    for unit, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if params >= scale:
            return f"{params / scale:g}{unit}"
    return str(params)


def unbuildable_refusal(name: ModelName) -> str:
    size = f"{size_words(name.params)} " if name.params else "tiny "
    return (
        f"model: '{name.words}' cannot be built from scratch here: trainteam builds llama, qwen2 or gpt2 "
        f"from a config; say e.g. 'a {size}llama from scratch', or drop 'from scratch' to fine-tune "
        f"your local copy of {name.words}"
    )


def sizeless_refusal(name: ModelName) -> str:
    return (
        f"model: '{name.words}' from scratch names no size; say one (e.g. 'a 10M {name.arch} from scratch', "
        f"'a tiny {name.arch}, hidden 128, 2 layers'), or drop 'from scratch' to fine-tune {name.words} from its "
        "weights"
    )


def several_refusal(names: list[ModelName]) -> str:
    return (
        f"model: the request names {len(names)} models ({', '.join(repr(n.words) for n in names)}); "
        "name the one to train"
    )
