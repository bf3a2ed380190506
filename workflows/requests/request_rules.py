r"""The offline orchestrator's reading of a request: sentence → TrainTask fields, or what is missing.

Rule-based and conservative on purpose. It reads what the text states, in the usual ways
people write it ("15 CPU minutes", "half an hour", "the built-in arithmetic demo", "then
align it with GRPO", "90 percent exact match"), and fills in only what has a safe default,
each one recorded in ``Reading.defaults`` so the plan states it before anything runs: a
tiny llama for a request that names the bundled demo (or a model built from scratch) but
no model, the addition demo for "the bundled (arithmetic) demo", the stages a model needs
(pretrain first for a model built from its config). A budget is never filled in, and data
paths are taken verbatim from the text (never guessed); nothing is downloaded. Held-out
rows need no file: without one they come from the data's own split or ``data.eval_fraction``.

A model the text names (``model_names``: a hub id, "llama-3-8b", "the smol model I imported")
is never swapped: it is built from random init only where the text says "from scratch" or
"pretrain" (at the size its name gives, for a family trainteam can build), else it is the folder
``resolve`` finds (``model_sources``), else a problem naming it; a closed model is a problem; a
name beside the folder the text uses is listed in ``Reading.ignored``. An architecture word with
a size or a shape ("a tiny llama", "a small GPT-2", "a llama, hidden 64") still describes a model
to build, as before; "fine-tune"/"LoRA"/"instruct" without a model get no tiny llama. The words
behind each model, data and stage choice are kept in ``Reading.said`` for the plan to quote.

Bounded on hostile text. A request is at most MAX_REQUEST_CHARS (4,000) characters: the
bundled demo request, which states every setting of a three-stage run, is ~1,300, so 4,000
leaves room for any request a person writes while capping the work (and what is sent to a
configured model). Every pattern runs in linear time: a number or a path can only start at
the start of its token (lookbehinds), numbers are atomic groups (no backtracking into their
digits), and a keyword followed by ``\w*`` starts at a word boundary; before this an
8,000-digit request took ~20 s here (every digit was a start, each scanning the rest).
Numbers are finite and signed ("-5 minutes" is -5, refused), and a time budget is at most
MAX_WALL_MINUTES (30 days).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainteam.contract.train_task import (  # one ceiling for requests and task files (30 days)
    MAX_WALL_MINUTES,
    DataSpec,
)
from trainteam.core.errors import BadInput
from trainteam.curation.sources import DATA_SUFFIXES
from trainteam.trainers.methods.method_registry import (
    align_methods,
    fine_tune_method,
    from_scratch_method,
    methods,
    rewarded_method,
    sampling_method,
    train_methods,
)
from trainteam.trainers.planning.planner import model_shape
from trainteam.workflows.requests.model_names import (
    HUB_WORDS,
    ModelChoice,
    ModelName,
    closed_refusal,
    distinct,
    find_names,
    several_refusal,
    sizeless_refusal,
    unbuildable_refusal,
)

STAGE_WORDS = {m.name: m.words for m in methods()}  # the words that name each method (its record's ``words``)
_ALIGN = r"\balign(?:s|ed|ing|ment)?\b"  # no method named: GRPO on a demo (a checkable answer), else asked
STAGE_ORDER = tuple(STAGE_WORDS)
SAMPLING = sampling_method().name  # the block of the sampling settings: generations, temperature, completions
DEMOS = {
    "addition": r"\baddition\b|\badd(?:ing|s)?\b|\bsums?\b|\bplus\b",
    "subtraction": r"subtract\w*|\bminus\b",
    "multiplication": r"multipl\w*|times tables?",
}
# The request names the bundled demo as such ("the built-in demo", "the bundled arithmetic demo"):
# with no operation named it is addition, and with no model named it gets the tiny llama. "The
# addition demo" alone is not enough for a model (the hostile suite's "train on the addition demo
# within 30 minutes" stays a refusal naming the model): it may be a person's own model to fine-tune.
_DEMO_CUE = r"\b(?:built[- ]?in|bundled)\b"
_SCRATCH = r"pre-?train\w*|from[- ]scratch|random init\w*"  # a model built from its config
# A named model is built only when the text says from scratch: "continued pretraining" starts from its weights.
_FROM_SCRATCH = (
    r"from[- ]scratch|random(?:ly)?[- ]init\w*|(?<!continued )(?<!continue )(?<!continual )"
    r"(?<!continuing )(?<!further )\bpre-?train\w*"
)
_PRETRAINED = r"fine-?tun\w*|\bq?lora\b|\binstruct\b"  # a pretrained start: no tiny llama is filled in for it
TINY_LLAMA = {"arch": "llama", "hidden_size": 128, "num_layers": 2, "num_heads": 4}
ARCHS = {"llama": r"\bllama\b", "qwen2": r"\bqwen-?2?\b", "gpt2": r"\bgpt-?2\b"}
SIZES = {
    "tiny": {"hidden_size": 128, "num_layers": 2, "num_heads": 4},
    "small": {"hidden_size": 256, "num_layers": 4, "num_heads": 4},
}
DIGITS = {"single": 9, "one": 9, "two": 99, "three": 999, "four": 9999}
MAX_REQUEST_CHARS = 4000
# A number starts where its token starts (not inside a digit run, nor after "1," or "1."); a
# minus is its sign only after a space or symbol ("budget -5", not "gpt-2" or "10-30"); the
# atomic group never backtracks into the digits.
_SIGN = r"(?:(?<![\w.,\-])-)?"
_NUM = rf"(?<!\d)(?<!\d[.,_])((?>{_SIGN}\d+(?:[,_]\d{{3}})*(?:\.\d+)?(?:e-?\d+)?))"
_PATH = r"(?<![\w.\-~/])((?:~|\.{1,2}|/)?[\w.\-~]*/[\w.\-/~]+|[\w.\-~]+\.(?:jsonl|json|csv|tsv|parquet|txt)\b)"
_HOURLY = r"\$?\s*" + _NUM + r"\s*(?:\$|usd|dollars)?\s*(?:/|an?|per)\s*(?:hour|hr|h)\b"
# "15 CPU minutes", "10-minute", "1.5 hours", "90 seconds", "2 days"; the qualifier says whose time.
_UNIT = (
    r"(?:(?:cpu|gpu|wall[- ]?clock|compute|machine|training)[- ])?(minutes?|mins?|hours?|hrs?|h|seconds?|secs?|days?)\b"
)
_DURATION = _NUM + r"[ -]?" + _UNIT
_WORD_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "twelve": 12,
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "forty-five": 45,
    "fifty": 50,
    "sixty": 60,
    "ninety": 90,
}
_HALVES = {
    "half an hour": 30,
    "half-an-hour": 30,
    "a half hour": 30,
    "a half-hour": 30,
    "quarter of an hour": 15,
    "a quarter hour": 15,
    "an hour and a half": 90,
    "one hour and a half": 90,
}
# Word durations have no seconds: "a second attempt" is not a budget.
_WORD_DURATION = (
    r"\b("
    + "|".join(sorted(_HALVES, key=len, reverse=True))
    + r")\b|\b("
    + "|".join(sorted(_WORD_NUMBERS, key=len, reverse=True))
    + r")[ -](?:(?:cpu|gpu|wall[- ]?clock|compute|machine|training)[- ])?(minutes?|mins?|hours?|hrs?|days?)\b"
)
_MINUTES_PER = {"m": 1.0, "h": 60.0, "s": 1 / 60, "d": 1440.0}


class _BadNumber(ValueError):
    """A number the text states that no field can hold (inf, 1e999): one line naming the field."""


def _short(s: str) -> str:
    """A number as written, cut to a readable length (a 4,000-digit one stays one short line)."""
    return s if len(s) <= 24 else f"{s[:12]}…({len(s):,} characters)"


def _num(s: str, field: str) -> float:
    value = float(s.replace(",", "").replace("_", ""))
    if not math.isfinite(value):
        raise _BadNumber(f"{field}: {_short(s)} is not a finite number")
    return value


def _int(s: str, field: str) -> int:
    return int(_num(s, field))


@dataclass
class Filled:
    """A default the reader chose for what the text leaves out: the field, its value, and the
    line the plan states ("model: none named; a tiny llama ...")."""

    field: str
    value: Any
    line: str


@dataclass
class Said:
    """A model, data or stage choice the text's own words make: the field, the words as written,
    and what they set (the plan quotes them)."""

    field: str
    words: str
    value: Any


Resolve = Callable[[ModelName], ModelChoice]  # a named model -> its local folder, or BadInput


@dataclass
class Reading:
    """What the text says. ``missing`` names required fields it does not say; ``defaults`` what
    the reader filled in because the text leaves it out and a safe default exists; ``said`` the
    choices its words make; ``named``/``choice`` the model name it uses and where that was found;
    ``ignored`` the model names it does not use."""

    fields: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    defaults: list[Filled] = field(default_factory=list)
    said: list[Said] = field(default_factory=list)
    named: ModelName | None = None
    choice: ModelChoice | None = None
    ignored: list[str] = field(default_factory=list)


def _search(pattern: str, text: str) -> re.Match | None:
    return re.search(pattern, text, re.IGNORECASE)


_DOWNLOAD = r"\bdownload\w*|\bthe hub\b|hugging ?face hub"
_FOLDER_FORMS = (
    r"(?:fine-?tune|start from|base model|model|checkpoint)\s+(?:at|in|from)?\s*" + _PATH,
    r"(?:model|checkpoint|folder)\s+(?:at|in)\s+([\w.\-/~]+)",
)
_NAME_IT = r"(?:name it|call it|named|called)\s+[\"'`]?([A-Za-z0-9][\w.\-]*)"
_SHAPE_FORMS = (
    ("hidden_size", r"hidden(?:[ _]size)?(?:\s+of)?\s+(\d+)|(?<!\d)(\d+)[- ]hidden"),
    ("num_layers", r"(?<!\d)(\d+)\s+(?:transformer\s+)?layers?\b|layers?\s*[:=]?\s*(\d+)"),
    ("num_heads", r"(?<!\d)(\d+)\s+(?:attention\s+)?heads?\b|heads?\s*[:=]?\s*(\d+)"),
    ("max_position_embeddings", r"context(?:\s+(?:length|window|of))?\s+(\d+)|(?<!\d)(\d+)[- ]token context"),
)


def _folder(text: str) -> tuple[re.Match | None, ModelName | None]:
    """A local folder the text names as the model ("the model in ./models/x", "model at base"), or
    an org/name it names so ("fine-tune Qwen/Qwen2.5-0.5B"): a folder here, else a hub id to look up."""
    for form in _FOLDER_FORMS:
        m = _search(form, text)
        if m and not m.group(1).lower().endswith(DATA_SUFFIXES) and m.group(1).lower() not in ("scratch", "random"):
            words = m.group(1).rstrip(".,;")
            if re.fullmatch(HUB_WORDS, words):
                return None, ModelName(words=words, kind="path", start=m.start(1))
            return m, None
    return None, None


def _quote(text: str, spans: list[tuple[int, int]]) -> str:
    """The words at ``spans``, neighbours joined, the words between left out: "tiny llama … hidden 64"."""
    merged: list[list[int]] = []
    for a, b in sorted(spans):
        if merged and (a <= merged[-1][1] or re.fullmatch(r"\s*", text[merged[-1][1] : a])):
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    return " … ".join(text[a:b] for a, b in merged)


def _shape(text: str) -> tuple[dict[str, Any], list[tuple[int, int]]]:
    """The shape the text gives a model to build: a size word, a parameter count, hidden size,
    layers, heads, context; with the spans of the words that said it."""
    spec: dict[str, Any] = {}
    spans: list[tuple[int, int]] = []
    for word, dims in SIZES.items():
        if m := _search(rf"\b{word}\b", text):
            spec.update(dims)
            spans.append(m.span())
    m = _search(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([kmb])(?:illion)?[- ]?param", text) or _search(
        r"(?<![\d.])(\d+(?:\.\d+)?)\s*([kmb])\b[- ](?:model|llama|qwen|gpt)", text
    )
    if m:
        spans.append(m.span())
        spec["params"] = int(float(m.group(1)) * {"k": 1e3, "m": 1e6, "b": 1e9}[m.group(2).lower()])
    for key, pat in _SHAPE_FORMS:
        if m := _search(pat, text):
            spec[key] = int(next(g for g in m.groups() if g))
            spans.append(m.span())
    return spec, spans


def _sized(spec: dict[str, Any], params: int | None) -> dict[str, Any]:
    """A parameter count as the planner's shape for it (a tiny count keeps the size word's shape)."""
    params = spec.pop("params", None) or params
    if params and params >= 5e6:
        shape, _ = model_shape(params)
        spec.update(hidden_size=shape.hidden_size, num_layers=shape.num_layers, num_heads=shape.num_heads)
    return spec


def _built(text: str, r: Reading) -> dict[str, Any] | None:
    """The model the text describes to build from a config (an architecture, a shape), else None."""
    spec, spans = _shape(text)
    for arch, pat in ARCHS.items():
        if m := _search(pat, text):
            spec["arch"] = arch
            spans.append(m.span())
    if not spans:
        return None
    r.said.append(Said("model", _quote(text, spans), "built"))
    return _sized(spec, None)


def _built_named(text: str, name: ModelName, r: Reading) -> dict[str, Any] | None:
    """A named model to build from scratch: its family's architecture at the size the name (or the
    text) gives; refused for a family trainteam cannot build, or without a size."""
    if name.arch is None:
        r.problems.append(unbuildable_refusal(name))
        return None
    spec, spans = _shape(text)
    if not (name.params or spans):
        r.problems.append(sizeless_refusal(name))
        return None
    r.said.append(Said("model", _quote(text, [(name.start, name.start + len(name.words)), *spans]), "built"))
    return {**_sized(spec, name.params), "arch": name.arch}


def _named(text: str, name: ModelName, r: Reading, resolve: Resolve | None) -> dict[str, Any] | None:
    """The model a name means: built when the text says from scratch (or describes an architecture
    word's shape, "a tiny llama"), else the local folder it resolves to; refused when it cannot be."""
    if name.kind == "closed":
        r.problems.append(closed_refusal(name))
        return None
    if name.kind == "name" and name.bare and (_shape(text)[1] or _search(_SCRATCH, text)):
        return _built(text, r)
    if name.kind == "name" and _search(_FROM_SCRATCH, text):
        return _built_named(text, name, r)
    r.named = name
    if resolve is None:  # reading the words only: the name stands for its folder
        r.said.append(Said("model", name.words, name.words))
        return {"path": name.words}
    try:
        r.choice = resolve(name)
    except BadInput as exc:
        r.problems.append(str(exc))
        return None
    r.said.append(Said("model", name.words, str(r.choice.path)))
    return {"path": str(r.choice.path)}


def _model(text: str, r: Reading, resolve: Resolve | None) -> dict[str, Any] | None:
    """The model the text names or describes: a local folder, a named model (resolved by
    ``resolve``: a registered model, the local Hugging Face cache), a shape to build; else None.
    Names beside the one used are listed in ``r.ignored``; two models, or one that cannot be
    placed, are problems."""
    if _search(_DOWNLOAD, text):
        r.problems.append(
            "model: nothing is downloaded; give a local model folder or describe a model "
            "to build (e.g. 'a tiny llama, hidden 128, 2 layers')"
        )
        return None
    folder, hub = _folder(text)
    skip = [m.span() for m in re.finditer(_PATH, text) if m.group(1).lower().endswith(DATA_SUFFIXES)]
    skip += [m.span() for m in [_search(_NAME_IT, text), folder] if m]
    skip += [(hub.start, hub.start + len(hub.words))] if hub else []
    names = distinct(find_names(text, skip) + ([hub] if hub else []))
    if folder is not None:
        r.ignored += [f"'{n.words}': a model name; the model is the folder {folder.group(1)}" for n in names]
        r.said.append(Said("model", folder.group(0), "folder"))
        return {"path": folder.group(1).rstrip(".,;")}
    used = [n for n in names if n.kind != "closed"] or names
    if len(used) > 1:
        r.problems.append(several_refusal(used))
        return None
    if not used:
        return _built(text, r)
    r.ignored += [f"'{n.words}': a model name; the model is '{used[0].words}'" for n in names if n is not used[0]]
    return _named(text, used[0], r, resolve)


def _filled_model(
    text: str, spec: dict[str, Any] | None, data: dict[str, Any] | None, r: Reading
) -> dict[str, Any] | None:
    """The model with what the text leaves out of its shape filled in (stated), or None (and
    ``model`` missing) when no model is named and none is safe: a tiny llama is the default only
    where the text names the bundled demo as such or says the model is built from scratch."""
    if spec is not None and "path" in spec:
        return spec
    if spec is None:
        if not (data and "demo" in data and (_search(_DEMO_CUE, text) or _search(_SCRATCH, text))) or (
            _search(_PRETRAINED, text) and not _search(_SCRATCH, text)
        ):
            r.missing.append("model")
            return None
        r.defaults.append(
            Filled(
                "model",
                dict(TINY_LLAMA),
                "model: none named; a tiny llama built from random "
                "init (hidden 128, 2 layers, 4 heads), the bundled demo's default",
            )
        )
        return dict(TINY_LLAMA)
    unsaid = {k: v for k, v in TINY_LLAMA.items() if k not in spec}
    if unsaid:
        said = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in unsaid.items())
        r.defaults.append(Filled("model", unsaid, f"model: {said} (not said; the tiny llama's)"))
    return {**unsaid, **spec}


def _demo(text: str, r: Reading) -> str | None:
    """The bundled demo the text names: the operation written first; "arithmetic" or the demo
    named as such ("the built-in demo") without an operation is addition, stated."""
    hits = [(m.start(), demo, m.group(0)) for demo, pat in DEMOS.items() if (m := _search(pat, text))]
    if hits:
        _, demo, words = min(hits)
        r.said.append(Said("data", words, demo))
        return demo
    said = _search(r"\barithmetic\b", text) or _search(
        r"\b(?:built[- ]?in|bundled)\b[^.;,]{0,40}?\bdemo\b|"
        r"\bthe demo\b",
        text,
    )
    if said is None:
        return None
    r.defaults.append(
        Filled(
            "data.demo",
            "addition",
            f"data: '{said.group(0)}' names no operation; the bundled "
            "addition demo (the others: subtraction, multiplication)",
        )
    )
    return "addition"


def _data_path(text: str, r: Reading) -> dict[str, Any] | None:
    """A user's data: the files the text writes; the eval file if it names one (none is fine)."""
    paths = [m.group(1) for m in re.finditer(_PATH, text) if m.group(1).lower().endswith(DATA_SUFFIXES)]
    ev = _search(
        r"(?:\beval\w*|held[- ]out|\btest|validat\w*)\s+(?:on|set|data|file|with|at)?\s*(?:on|at|in)?\s*" + _PATH, text
    )
    eval_path = ev.group(1) if ev and ev.group(1) in paths else None
    train = [p for p in paths if p != eval_path]
    if not train:
        r.problems.append("data.path: the request names only an eval file; give the training file too")
        return None
    data: dict[str, Any] = {"path": train[0]}
    r.said.append(Said("data", train[0], "path"))
    if eval_path is None and len(train) > 1:
        eval_path = train[1]
    if eval_path is not None:
        data["eval_path"] = eval_path
        r.said.append(Said("data", eval_path, "eval_path"))
        return data
    m = _search(
        r"(?:hold(?:ing)?\s+out|held[- ]out|\beval\w*|\btest|validat\w*)\s+(?:split\s+|set\s+)?(?:of\s+)?"
        + _NUM
        + r"\s*%",
        text,
    ) or _search(
        _NUM + r"\s*%\s+(?:of\s+(?:it|them|the\s+rows|the\s+data)\s+)?"
        r"(?:held[- ]out|(?:for|as)\s+(?:eval\w*|test\w*|validat\w*))",
        text,
    )
    if m:
        data["eval_fraction"] = _num(m.group(1), "data.eval_fraction") / 100
    return data


def _data(text: str, r: Reading) -> dict[str, Any] | None:
    if any(m.group(1).lower().endswith(DATA_SUFFIXES) for m in re.finditer(_PATH, text)):
        return _data_path(text, r)
    demo = _demo(text, r)
    if demo is None:
        r.missing.append("data")
        return None
    data: dict[str, Any] = {"demo": demo}
    m = _search(_NUM + r"\s+(?:held[- ]out|eval\w*|test)", text) or _search(
        r"(?:held[- ]out|\beval\w*|\btest)(?:\s+set)?\s+(?:of\s+)?" + _NUM + r"\b(?!\s*%)", text
    )
    if m:
        data["n_eval"] = _int(m.group(1), "data.n_eval")
    m = _search(
        _NUM + r"\s+(?:training\s+|train\s+)?(?:addition\s+|arithmetic\s+)?(?:problems|examples|rows|samples)", text
    )
    if m and not (data.get("n_eval") == _int(m.group(1), "data.n_train") and "held" in text[m.end() : m.end() + 10]):
        data["n_train"] = _int(m.group(1), "data.n_train")
    m = _search(r"(?:operands?|numbers?)\s+(?:up to|below|under|<=?)\s+" + _NUM, text)
    if m:
        data["max_operand"] = _int(m.group(1), "data.max_operand")
    else:
        m = _search(r"\b(single|one|two|three|four)[- ]digit", text) or _search(r"(?<![\w.\-])([1-9])[- ]digit", text)
        if m:
            word = m.group(1).lower()
            data["max_operand"] = DIGITS[word] if word in DIGITS else 10 ** int(word) - 1
    m = _search(r"\bseed\s+(\d+)", text)
    if m:
        data["seed"] = int(m.group(1))
    return data


def _money(m: re.Match, field: str) -> float:
    """A money amount; a minus before the ``$`` ("-$5") is its sign too."""
    value = _num(m.group(1), field)
    return -abs(value) if m.start() > 0 and m.string[m.start() - 1] == "-" else value


def _budget_problem(budget: dict[str, Any], said: str) -> str | None:
    """Why the budget read cannot be a ceiling: negative, zero, or past MAX_WALL_MINUTES."""
    for key in ("cost_per_hour_usd", "max_cost_usd"):
        if budget.get(key, 0) < 0:
            return f"budget.{key}: {budget[key]:g} is negative; give a positive amount"
    minutes = budget["max_wall_minutes"]
    if minutes <= 0:
        return f"budget.max_wall_minutes: {said} is not a positive time limit; give one (e.g. 'budget 20 minutes')"
    if minutes > MAX_WALL_MINUTES:
        shown = f"{minutes:,.0f}" if minutes < 1e9 else f"{minutes:.3g}"
        return (
            f"budget.max_wall_minutes: {said} is {shown} minutes, over the ceiling of "
            f"{MAX_WALL_MINUTES:,} minutes (30 days); give a smaller time limit"
        )
    return None


@dataclass
class Duration:
    """A time the text writes: where, in minutes (None: a number no field can hold), as written,
    and its unit's letter (m, h, s, d)."""

    start: int
    end: int
    minutes: float | None
    said: str
    unit: str = "m"


_JOINED = r",? ?(?:and )?"  # "1 hour 30 minutes", "1 hour, 30 minutes", "2 hours and 15 minutes"


def _durations(text: str) -> list[Duration]:
    """Every duration the text writes, in order: "15 CPU minutes", "1.5 hours", "90 seconds",
    "half an hour", "two hours"; "1 hour 30 minutes" and "2 hours and a half" are one each.
    A number too large to hold stays a Duration with ``minutes`` None (refused by its reader)."""
    found: list[Duration] = []
    for m in re.finditer(_DURATION, text, re.IGNORECASE):
        value, unit = _finite(m.group(1)), m.group(2)[0].lower()
        found.append(
            Duration(
                m.start(),
                m.end(),
                None if value is None else value * _MINUTES_PER[unit],
                f"{_short(m.group(1))} {m.group(2)}",
                unit,
            )
        )
    for m in re.finditer(_WORD_DURATION, text, re.IGNORECASE):
        if m.group(1):
            found.append(Duration(m.start(), m.end(), float(_HALVES[m.group(1).lower()]), m.group(1)))
        else:
            unit = m.group(3)[0].lower()
            found.append(
                Duration(m.start(), m.end(), _WORD_NUMBERS[m.group(2).lower()] * _MINUTES_PER[unit], m.group(0), unit)
            )
    found.sort(key=lambda d: d.start)
    merged: list[Duration] = []
    for d in found:
        prev = merged[-1] if merged else None
        if (
            prev
            and prev.unit == "h"
            and d.unit == "m"
            and prev.minutes is not None
            and d.minutes is not None
            and re.fullmatch(_JOINED, text[prev.end : d.start], re.IGNORECASE)
        ):
            merged[-1] = Duration(prev.start, d.end, prev.minutes + d.minutes, f"{prev.said} {d.said}")
            continue
        if (
            d.unit == "h"
            and d.minutes is not None
            and re.match(r" and a half\b", text[d.end : d.end + 12], re.IGNORECASE)
        ):
            d = Duration(d.start, d.end + 11, d.minutes + 30, f"{d.said} and a half")
        merged.append(d)
    return merged


_NO_CEILING = (
    r"no budget|unlimited|whatever it takes|as long as it (?:takes|needs)|no (?:time )?limit|"
    r"without (?:a |any )?(?:time |budget )?limit|no deadline"
)
_CUE = r"(?:budget|within|under|at most|max(?:imum)?|limit|no more than|cap|in|spend|for)\W*(?:of\s+)?(?:\w+\s+){0,2}$"


def _budget(text: str, r: Reading) -> dict[str, Any] | None:
    if _search(_NO_CEILING, text):
        r.problems.append("budget: a run never spends without a ceiling; give a time limit (e.g. 'budget 20 minutes')")
        return None
    budget: dict[str, Any] = {}
    rest = text
    m = _search(_HOURLY, rest)
    if m:
        budget["cost_per_hour_usd"] = _money(m, "budget.cost_per_hour_usd")
        rest = rest[: m.start()] + " " * (m.end() - m.start()) + rest[m.end() :]
    m = _search(r"\$\s*" + _NUM, rest) or _search(_NUM + r"\s*(?:usd|dollars)\b", rest)
    if m:
        budget["max_cost_usd"] = _money(m, "budget.max_cost_usd")
    durations = _durations(rest)
    said = ""
    if durations:
        chosen = next(
            (d for d in durations if re.search(_CUE, rest[max(0, d.start - 30) : d.start], re.IGNORECASE)), durations[0]
        )
        if chosen.minutes is None:
            raise _BadNumber(f"budget.max_wall_minutes: {chosen.said.split()[0]} is not a finite number")
        budget["max_wall_minutes"] = chosen.minutes
        said = chosen.said
    elif "max_cost_usd" in budget and budget.get("cost_per_hour_usd"):
        budget["max_wall_minutes"] = budget["max_cost_usd"] / budget["cost_per_hour_usd"] * 60
        said = "the money over the hourly price"
        r.notes.append("budget: time limit derived from the money and the hourly price")
    elif "max_cost_usd" in budget:
        r.problems.append("budget.max_wall_minutes: give a time limit or the hourly price with the money budget")
        return None
    else:
        r.missing.append("budget")
        return None
    problem = _budget_problem(budget, said)
    if problem:
        r.problems.append(problem)
        return None
    return budget


def _finite(s: str) -> float | None:
    try:
        return _num(s, "")
    except _BadNumber:
        return None


def stated_budget(text: str) -> dict[str, set[float]]:
    """Every budget amount the text writes, by field, in that field's unit: hourly prices, money
    amounts (not the hourly ones) and durations in minutes. A model's budget must be one of them."""
    text = " ".join(text[: MAX_REQUEST_CHARS + 1].split())
    out: dict[str, set[float | None]] = {"cost_per_hour_usd": set(), "max_cost_usd": set(), "max_wall_minutes": set()}
    rest = text
    for m in re.finditer(_HOURLY, text, re.IGNORECASE):
        out["cost_per_hour_usd"].add(_finite(m.group(1)))
        rest = rest[: m.start()] + " " * (m.end() - m.start()) + rest[m.end() :]
    for pat in (r"\$\s*" + _NUM, _NUM + r"\s*(?:usd|dollars)\b"):
        out["max_cost_usd"].update(_finite(m.group(1)) for m in re.finditer(pat, rest, re.IGNORECASE))
    out["max_wall_minutes"].update(d.minutes for d in _durations(rest))
    return {k: {v for v in vals if v is not None} for k, vals in out.items()}


def stated_numbers(text: str) -> set[float]:
    """Every finite number the text writes, also read as a percentage (90 → 0.9) and as hours
    in minutes (2 → 120): what a model's answer may put in a numeric field."""
    read = (_finite(m.group(1)) for m in re.finditer(_NUM, text[: MAX_REQUEST_CHARS + 1]))
    values = {v for v in read if v is not None}
    return values | {v / 100 for v in values} | {v * 60 for v in values}


def _clauses(text: str) -> list[str]:
    return [c for c in re.split(r"[.;]\s+|[.;]$|,?\s+then\s+|\band then\b", text) if c.strip()]


def _training(text: str, stages: list[str]) -> dict[str, dict[str, Any]]:
    training: dict[str, dict[str, Any]] = {}
    train_stages = [s for s in stages]
    for clause in _clauses(text):
        named = [s for s in STAGE_ORDER if s in stages and _search(STAGE_WORDS[s], clause)]
        cfg: dict[str, Any] = {}
        m = _search(r"\b(?:checkpoint|save)\w*\s+every\s+" + _NUM + r"\s+steps", clause)
        if m:
            cfg["save_steps"] = _int(m.group(1), "training.save_steps")
            clause = clause[: m.start()] + clause[m.end() :]
        if _search(r"\b(?:no|without)\s+(?:gradient\s+|grad\s+)?clipping\b", clause):
            cfg["max_grad_norm"] = 1e9  # TrainConfig has no "off": a norm no gradient reaches
        m = _search(r"warm[- ]?(?:ing )?up(?:\s+(?:of|for|over))?\s+" + _NUM + r"\s+steps", clause)
        if m:
            cfg["warmup_steps"] = _int(m.group(1), "training.warmup_steps")
            clause = clause[: m.start()] + clause[m.end() :]
        for key, pat, conv in (
            ("max_steps", _NUM + r"\s+(?:[a-z-]+\s+)?steps\b", _int),
            ("per_device_train_batch_size", r"batch(?:\s+size)?(?:\s+of)?\s+" + _NUM, _int),
            ("learning_rate", r"(?:learning rate|\blr)(?:\s+of)?\s*=?\s*" + _NUM, _num),
            ("max_length", r"\b(?:sequence length|seq(?:uence)?[_ ]len\w*)(?:\s+of)?\s+" + _NUM, _int),
        ):
            m = _search(pat, clause)
            if m:
                cfg[key] = conv(m.group(1), f"training.{key}")
        m = _search(_NUM + r"\s+generations", clause)
        if m:
            cfg.setdefault(SAMPLING, {})["num_generations"] = _int(m.group(1), "training.grpo.num_generations")
        m = _search(r"(?:sampling\s+)?temperature(?:\s+of)?\s*=?\s*" + _NUM, clause)
        if m:
            cfg.setdefault(SAMPLING, {})["temperature"] = _num(m.group(1), "training.grpo.temperature")
        m = _search(r"completions?\s+(?:of\s+)?(?:up to\s+|at most\s+)?" + _NUM + r"\s+tokens", clause)
        if m:
            cfg.setdefault(SAMPLING, {})["max_completion_length"] = _int(
                m.group(1), "training.grpo.max_completion_length"
            )
        if _search(r"\bq?lora\b", clause):
            cfg["lora"] = {"quantize_4bit": bool(_search(r"\bqlora\b", clause))}
        if not cfg:
            continue
        for stage in named or train_stages:
            if named or stage not in training:  # an unnamed clause fills only stages without their own
                training.setdefault(stage, {}).update(cfg)
    return training


_GATE_FORMS = (
    _NUM + r"\s*%\s*(?:exact[- ]match|accuracy|correct|right)",
    r"(?:exact[- ]match|accuracy)\s+(?:of\s+)?(?:at least\s+|above\s+|over\s+|>=?\s*)?" + _NUM + r"\s*(%)?",
    r"\b(?:reach\w*|hit\w*|get\w*|achiev\w*|scor\w*)\s+(?:at least\s+)?" + _NUM + r"\s*%(?!\s*(?:of\s+\w+\s+)?held)",
)


def _gates(text: str, stages: list[str]) -> dict[str, dict[str, Any]]:
    gates: dict[str, dict[str, Any]] = {}
    train_stages = [s for s in stages if s in train_methods()]
    for clause in _clauses(text):
        named = [s for s in STAGE_ORDER if s in stages and _search(STAGE_WORDS[s], clause)]
        if _search(r"(?:must|may|should|does) not regress|no regression", clause):
            stage = named[-1] if named else stages[-1]
            gates[stage] = {"metric": "exact_match", "max_regression": 0.0}
            continue
        m = next((m for pat in _GATE_FORMS if (m := _search(pat, clause))), None)
        if not m:
            continue
        value = _num(m.group(1), "gates.min")
        pct = "%" in m.group(0)
        stage = named[-1] if named else (train_stages[-1] if train_stages else stages[-1])
        gates[stage] = {"metric": "exact_match", "min": value / 100 if pct or value > 1 else value}
    return gates


_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")  # C0/C1 controls but tab and newlines
_TRUST = r"trust[_ -]?remote[_ -]?code|remote code"


def request_refusal(text: str) -> str | None:
    """The one-line refusal of a request that is over MAX_REQUEST_CHARS or holds control
    characters (terminal escapes, NUL), else None: checked before anything reads it."""
    if len(text) > MAX_REQUEST_CHARS:
        return (
            f"request: {len(text):,} characters, over the limit of {MAX_REQUEST_CHARS:,}; say what to train, "
            "on what data and within what budget in fewer words (settings beyond that belong in a task file)"
        )
    m = _CONTROL.search(text)
    if m:
        return (
            f"request: holds a control character ({ascii(m.group())[1:-1]} at position {m.start()}); "
            "write the request as plain text"
        )
    return None


def _trust_problem(text: str) -> str | None:
    """A request may not turn trust_remote_code on (saying it stays off is fine)."""
    m = _search(_TRUST, text)
    if m is None or _search(
        r"\b(?:no|not|never|without|don't|do not)\s+(?:\w+\s+){0,2}$", text[max(0, m.start() - 40) : m.start()]
    ):
        return None
    return (
        "model.trust_remote_code: a request cannot turn it on; only your own task file can "
        "(model.trust_remote_code: true, run with execute-workflow --task)"
    )


def _asks(text: str) -> list[str]:
    """Steps the text asks to approve: "ask … before training" (the first cue, then each step's
    phrase after it — one pass each, where ``cue.*phrase`` rescanned the rest at every cue)."""
    cue = _search(r"\b(?:ask|check with|wait for)\b", text)
    if cue is None:
        return []
    tail = text[cue.end() :]
    return [
        step
        for step, pat in (
            ("train", r"before (?:any )?train\w*"),
            ("register_model", r"before regist\w*"),
            ("curate", r"before curat\w*"),
        )
        if _search(pat, tail)
    ]


def read_request(text: str, resolve: Resolve | None = None) -> Reading:
    """Extract TrainTask fields from ``text``; required fields it does not state go to ``missing``;
    a request too long, or a number no field can hold, is a problem. ``resolve`` finds the local
    folder of a model the text names (``model_sources.resolver``); without it the name stands for
    its folder as written, and nothing outside the text is read."""
    r = Reading()
    refusal = request_refusal(text) or _trust_problem(text[:MAX_REQUEST_CHARS])
    if refusal:
        r.problems.append(refusal)
        return r
    text = " ".join(text.split())
    if not text:
        r.missing += ["model", "data", "budget"]
        return r
    try:
        r.fields = _read(text, r, resolve)
    except _BadNumber as exc:
        r.problems.append(str(exc))
    r.missing.sort(key=("model", "data", "budget").index)
    return r


def _stages(text: str, model: dict[str, Any] | None, data: dict[str, Any] | None, r: Reading) -> list[str]:
    """The stages the text names; what a model needs first (pretrain for one built from its config)
    and a method for a bare "align" (GRPO on a demo) are filled in and stated."""
    said = {s: m.group(0) for s in STAGE_ORDER if (m := _search(STAGE_WORDS[s], text))}
    stages = list(said)
    r.said += [Said("stages", words, s) for s, words in said.items()]
    if _search(_ALIGN, text) and not any(s in align_methods() for s in stages):
        if data is not None and "demo" in data:
            rewarded = rewarded_method().name
            stages.append(rewarded)
            r.defaults.append(
                Filled(
                    "stages",
                    rewarded,
                    "stages: 'align' names no method; GRPO, rewarded by the demo's checkable answers",
                )
            )
        else:
            r.problems.append(
                "stages: 'align' names no method; say DPO (chosen/rejected pairs) or GRPO (prompts "
                "with a checkable answer)"
            )
    built = model is None or "path" not in model
    named = list(stages)
    scratch = from_scratch_method()
    if built and scratch not in stages:
        stages.insert(0, scratch)  # a model built from a config starts from random init (and needs a tokenizer)
    if not built and not stages:
        stages = [fine_tune_method()]
    if not named:
        why = "a local model is fine-tuned" if not built else "a model built from its config starts from random init"
        r.defaults.append(Filled("stages", stages[0], f"stages: none named; {stages[0]} ({why})"))
    elif stages != named:
        r.defaults.append(
            Filled(
                "stages",
                scratch,
                f"stages: {scratch} first, then {' → '.join(named)} (the model "
                "is built from its config, so it starts from random init)",
            )
        )
    return stages


def _demo_sizes(data: dict[str, Any], r: Reading) -> None:
    """State the demo's generated sizes the text does not give."""
    default = {k: DataSpec.model_fields[k].default for k in ("n_train", "n_eval", "max_operand")}
    unsaid = [
        text.format(default[key])
        for key, text in (
            ("n_train", "{:,} training problems"),
            ("n_eval", "{:,} held out"),
            ("max_operand", "operands up to {:,}"),
        )
        if key not in data
    ]
    if unsaid:
        r.defaults.append(Filled("data.demo", data["demo"], f"data: {', '.join(unsaid)} (the demo's defaults)"))


def _search_words(text: str) -> dict[str, Any] | None:
    """ "no recipe search" turns the training engineer's search off; "tune the hyper-parameters" on."""
    if _search(
        r"\b(?:no|without|skip|don't|do not)\s+(?:\w+\s+){0,2}(?:recipe|hyper-?parameter|learning[- ]rate)"
        r"\s+search|\b(?:don't|do not)\s+search\b",
        text,
    ):
        return {"enabled": False}
    if _search(
        r"\b(?:recipe|hyper-?parameter|learning[- ]rate) search|\bsearch (?:for )?(?:the |a )?(?:best )?"
        r"(?:recipe|hyper-?parameters|learning rate)|\btune (?:the )?hyper-?parameters",
        text,
    ):
        return {"enabled": True}
    return None


def _read(text: str, r: Reading, resolve: Resolve | None) -> dict[str, Any]:
    text = re.sub(r"\s*\b(?:percent|per cent|pct)\b", "%", text, flags=re.IGNORECASE).replace("≥", ">=")
    leaks = _search(r"\b(?:plant|inject|leak)\w*\s+" + _NUM + r"[^.;]*", text)
    if leaks:  # read first and cut out: its "20 held-out problems" must not count as the eval size
        text = text[: leaks.start()] + text[leaks.end() :]
    spec = _model(text, r, resolve)
    data = _data(text, r)
    refused = spec is None and any(p.startswith("model") for p in r.problems)  # "download ...": said, refused
    model = None if refused else _filled_model(text, spec, data, r)
    budget = _budget(text, r)
    stages = _stages(text, model, data, r)
    fields: dict[str, Any] = {"stages": stages}
    if model is not None:
        fields["model"] = model
    if data is not None:
        fields["data"] = data
        if "demo" in data:
            _demo_sizes(data, r)
        if leaks:
            data["inject_leaks"] = _int(leaks.group(1), "data.inject_leaks")
    if budget is not None:
        fields["budget"] = budget
    training = _training(text, stages)
    if training:
        fields["training"] = training
    gates = _gates(text, stages)
    if gates:
        fields["gates"] = gates
    _extras(text, data, fields)
    return fields


def _extras(text: str, data: dict[str, Any] | None, fields: dict[str, Any]) -> None:
    """Tokenizer, name, retry, approvals and the recipe search, where the text says them."""
    m = _search(r"vocab(?:ulary)?(?:\s+size)?(?:\s+of)?\s+" + _NUM, text)
    if m:
        fields.setdefault("tokenizer", {})["vocab_size"] = _int(m.group(1), "tokenizer.vocab_size")
    if _search(r"(?:without|no|don't|do not)\s+split\w*\s+digits|digits (?:not|un)split", text):
        fields.setdefault("tokenizer", {})["split_digits"] = False
    m = _search(r"(?:name it|call it|named|called)\s+[\"'`]?([A-Za-z0-9][\w.\-]*)", text)
    name = m.group(1).rstrip(".") if m else None
    if name is None and data:
        name = (
            data.get("demo")
            or re.sub(r"[^\w.\-]", "-", str(data.get("path", "task")).rsplit("/", 1)[-1].rsplit(".", 1)[0])
            or "task"
        )
    fields["name"] = (name or "task")[:64]
    if _search(r"\bretry\b|try again|second (?:attempt|chance)", text):
        fields["allow_retry"] = True
    asks = _asks(text)
    if asks:
        fields["require_approval"] = asks
    search = _search_words(text)
    if search is not None:
        fields["search"] = search
