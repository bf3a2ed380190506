"""The offline orchestrator's reading of a request: sentence → TrainTask fields, or what is missing.

Rule-based and conservative on purpose. It extracts only what the text states; model,
data and budget are never filled in: when one is absent the result names it. Data
paths are taken verbatim from the text (never guessed), and nothing is downloaded.

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
from dataclasses import dataclass, field
from typing import Any

from trainteam.trainers.planning.planner import model_shape
from trainteam.workflows.task import MAX_WALL_MINUTES  # one ceiling for requests and task files (30 days)

STAGE_WORDS = {
    "pretrain": r"pre-?train\w*|from scratch|random init\w*",
    "sft": r"\bsft\b|fine-?tun\w*|supervised",
    "dpo": r"\bdpo\b|preference",
    "grpo": r"\bgrpo\b|reinforcement|\brl\b",
}
STAGE_ORDER = ("pretrain", "sft", "dpo", "grpo")
DEMOS = {
    "addition": r"\baddition\b|\badd(?:ing|s)?\b|\bsums?\b|\bplus\b",
    "subtraction": r"subtract\w*|\bminus\b",
    "multiplication": r"multipl\w*|times tables?",
}
ARCHS = {"llama": r"\bllama\b", "qwen2": r"\bqwen-?2?\b", "gpt2": r"\bgpt-?2\b"}
SIZES = {"tiny": {"hidden_size": 128, "num_layers": 2, "num_heads": 4},
         "small": {"hidden_size": 256, "num_layers": 4, "num_heads": 4}}
DIGITS = {"single": 9, "one": 9, "two": 99, "three": 999, "four": 9999}
MAX_REQUEST_CHARS = 4000
# A number starts where its token starts (not inside a digit run, nor after "1," or "1."); a
# minus is its sign only after a space or symbol ("budget -5", not "gpt-2" or "10-30"); the
# atomic group never backtracks into the digits.
_SIGN = r"(?:(?<![\w.,\-])-)?"
_NUM = rf"(?<!\d)(?<!\d[.,_])((?>{_SIGN}\d+(?:[,_]\d{{3}})*(?:\.\d+)?(?:e-?\d+)?))"
_PATH = r"(?<![\w.\-~/])((?:~|\.{1,2}|/)?[\w.\-~]*/[\w.\-/~]+|[\w.\-~]+\.jsonl?)"
_HOURLY = r"\$?\s*" + _NUM + r"\s*(?:\$|usd|dollars)?\s*(?:/|an?|per)\s*(?:hour|hr|h)\b"
_DURATION = _NUM + r"\s*(minutes?|mins?|hours?|hrs?|h)\b"


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
class Reading:
    """What the text says. ``missing`` names required fields it does not say."""

    fields: dict[str, Any] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _search(pattern: str, text: str) -> re.Match | None:
    return re.search(pattern, text, re.IGNORECASE)


def _model(text: str, r: Reading) -> dict[str, Any] | None:
    if _search(r"hugging ?face|\bthe hub\b|download", text):
        r.problems.append("model: nothing is downloaded; give a local model folder or describe a model "
                          "to build (e.g. 'a tiny llama, hidden 128, 2 layers')")
        return None
    spec: dict[str, Any] = {}
    found = False
    m = _search(r"(?:fine-?tune|start from|base model|model|checkpoint)\s+(?:at|in|from)?\s*" + _PATH, text) or \
        _search(r"(?:model|checkpoint|folder)\s+(?:at|in)\s+([\w.\-/~]+)", text)
    if m and not m.group(1).endswith((".jsonl", ".json")) and m.group(1).lower() not in ("scratch", "random"):
        spec["path"] = m.group(1).rstrip(".,;")
        return spec
    for arch, pat in ARCHS.items():
        if _search(pat, text):
            spec["arch"], found = arch, True
    for word, dims in SIZES.items():
        if _search(rf"\b{word}\b", text):
            spec.update(dims)
            found = True
    m = _search(r"(?<![\d.])(\d+(?:\.\d+)?)\s*([kmb])(?:illion)?[- ]?param", text) or _search(
        r"(?<![\d.])(\d+(?:\.\d+)?)\s*([kmb])\b[- ](?:model|llama|qwen|gpt)", text)
    if m:
        n = int(float(m.group(1)) * {"k": 1e3, "m": 1e6, "b": 1e9}[m.group(2).lower()])
        shape, _ = model_shape(n)
        if n >= 5e6:  # a tiny count keeps the size word's (or default) shape; big ones take the planner's
            spec.update(hidden_size=shape.hidden_size, num_layers=shape.num_layers, num_heads=shape.num_heads)
        found = True
    for key, pat in (("hidden_size", r"hidden(?:[ _]size)?(?:\s+of)?\s+(\d+)|(?<!\d)(\d+)[- ]hidden"),
                     ("num_layers", r"(?<!\d)(\d+)\s+(?:transformer\s+)?layers?\b|layers?\s*[:=]?\s*(\d+)"),
                     ("num_heads", r"(?<!\d)(\d+)\s+(?:attention\s+)?heads?\b|heads?\s*[:=]?\s*(\d+)"),
                     ("max_position_embeddings",
                      r"context(?:\s+(?:length|window|of))?\s+(\d+)|(?<!\d)(\d+)[- ]token context")):
        m = _search(pat, text)
        if m:
            spec[key] = int(next(g for g in m.groups() if g))
            found = True
    if not found:
        r.missing.append("model")
        return None
    return spec


def _data(text: str, r: Reading) -> dict[str, Any] | None:
    data: dict[str, Any] = {}
    paths = [m.group(1) for m in re.finditer(_PATH, text) if m.group(1).endswith((".jsonl", ".json"))]
    ev = _search(r"(?:\beval\w*|held[- ]out|\btest)\s+(?:on|set|data|file|with|at)?\s*(?:on|at|in)?\s*" + _PATH, text)
    if paths:
        eval_path = ev.group(1) if ev and ev.group(1) in paths else None
        train = [p for p in paths if p != eval_path]
        if not train:
            r.problems.append("data.path: the request names only an eval file; give the training file too")
            return None
        data["path"] = train[0]
        if eval_path is None and len(train) > 1:
            eval_path = train[1]
        if eval_path is None:
            r.problems.append("data.eval_path: give a held-out JSONL file too (exact match needs held-out problems)")
            return None
        data["eval_path"] = eval_path
    else:
        for demo, pat in DEMOS.items():
            if _search(pat, text):
                data["demo"] = demo
                break
        else:
            r.missing.append("data")
            return None
        m = _search(_NUM + r"\s+(?:held[- ]out|eval\w*|test)", text) or _search(
            r"(?:held[- ]out|\beval\w*|\btest)(?:\s+set)?\s+(?:of\s+)?" + _NUM + r"\b(?!\s*%)", text)
        if m:
            data["n_eval"] = _int(m.group(1), "data.n_eval")
        m = _search(_NUM + r"\s+(?:training\s+|train\s+)?(?:addition\s+|arithmetic\s+)?(?:problems|examples|rows|samples)",
                    text)
        if m and (m.end() < len(text)) and not (data.get("n_eval") == _int(m.group(1), "data.n_train")
                                                and "held" in text[m.end():m.end() + 10]):
            data["n_train"] = _int(m.group(1), "data.n_train")
        m = _search(r"(?:operands?|numbers?)\s+(?:up to|below|under|<=?)\s+" + _NUM, text)
        if m:
            data["max_operand"] = _int(m.group(1), "data.max_operand")
        else:
            m = _search(r"\b(single|one|two|three|four)[- ]digit", text)
            if m:
                data["max_operand"] = DIGITS[m.group(1).lower()]
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
        return (f"budget.max_wall_minutes: {said} is {shown} minutes, over the ceiling of "
                f"{MAX_WALL_MINUTES:,} minutes (30 days); give a smaller time limit")
    return None


def _budget(text: str, r: Reading) -> dict[str, Any] | None:
    if _search(r"no budget|unlimited|whatever it takes|no (?:time )?limit", text):
        r.problems.append("budget: a run never spends without a ceiling; give a time limit (e.g. 'budget 20 minutes')")
        return None
    budget: dict[str, Any] = {}
    rest = text
    m = _search(_HOURLY, rest)
    if m:
        budget["cost_per_hour_usd"] = _money(m, "budget.cost_per_hour_usd")
        rest = rest[:m.start()] + rest[m.end():]
    m = _search(r"\$\s*" + _NUM, rest) or _search(_NUM + r"\s*(?:usd|dollars)\b", rest)
    if m:
        budget["max_cost_usd"] = _money(m, "budget.max_cost_usd")
    durations = list(re.finditer(_DURATION, rest, re.IGNORECASE))
    said = ""
    if durations:
        cue = r"(?:budget|within|under|at most|max(?:imum)?|limit|no more than|cap|in)\W*(?:of\s+)?(?:\w+\s+){0,2}$"
        chosen = next((d for d in durations if re.search(cue, rest[max(0, d.start() - 30):d.start()], re.I)),
                      durations[0])
        value, unit = _num(chosen.group(1), "budget.max_wall_minutes"), chosen.group(2).lower()
        budget["max_wall_minutes"] = value * 60 if unit.startswith("h") else value
        said = f"{_short(chosen.group(1))} {chosen.group(2)}"
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
    text = " ".join(text[:MAX_REQUEST_CHARS + 1].split())
    out: dict[str, set[float]] = {"cost_per_hour_usd": set(), "max_cost_usd": set(), "max_wall_minutes": set()}
    rest = text
    for m in re.finditer(_HOURLY, text, re.IGNORECASE):
        out["cost_per_hour_usd"].add(_finite(m.group(1)))
        rest = rest[:m.start()] + " " * (m.end() - m.start()) + rest[m.end():]
    for pat in (r"\$\s*" + _NUM, _NUM + r"\s*(?:usd|dollars)\b"):
        out["max_cost_usd"].update(_finite(m.group(1)) for m in re.finditer(pat, rest, re.IGNORECASE))
    for m in re.finditer(_DURATION, rest, re.IGNORECASE):
        value = _finite(m.group(1))
        out["max_wall_minutes"].add(None if value is None else value * 60 if m.group(2).lower().startswith("h") else value)
    return {k: {v for v in vals if v is not None} for k, vals in out.items()}


def stated_numbers(text: str) -> set[float]:
    """Every finite number the text writes, also read as a percentage (90 → 0.9) and as hours
    in minutes (2 → 120): what a model's answer may put in a numeric field."""
    values = {_finite(m.group(1)) for m in re.finditer(_NUM, text[:MAX_REQUEST_CHARS + 1])}
    values.discard(None)
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
            clause = clause[:m.start()] + clause[m.end():]
        if _search(r"\b(?:no|without)\s+(?:gradient\s+|grad\s+)?clipping\b", clause):
            cfg["max_grad_norm"] = 1e9  # TrainConfig has no "off": a norm no gradient reaches
        m = _search(r"warm[- ]?(?:ing )?up(?:\s+(?:of|for|over))?\s+" + _NUM + r"\s+steps", clause)
        if m:
            cfg["warmup_steps"] = _int(m.group(1), "training.warmup_steps")
            clause = clause[:m.start()] + clause[m.end():]
        for key, pat, conv in (("max_steps", _NUM + r"\s+(?:[a-z-]+\s+)?steps\b", _int),
                               ("per_device_batch_size", r"batch(?:\s+size)?(?:\s+of)?\s+" + _NUM, _int),
                               ("learning_rate", r"(?:learning rate|\blr)(?:\s+of)?\s*=?\s*" + _NUM, _num),
                               ("seq_len", r"\b(?:sequence length|seq(?:uence)?[_ ]len\w*)(?:\s+of)?\s+" + _NUM, _int)):
            m = _search(pat, clause)
            if m:
                cfg[key] = conv(m.group(1), f"training.{key}")
        m = _search(_NUM + r"\s+generations", clause)
        if m:
            cfg.setdefault("grpo", {})["num_generations"] = _int(m.group(1), "training.grpo.num_generations")
        m = _search(r"(?:sampling\s+)?temperature(?:\s+of)?\s*=?\s*" + _NUM, clause)
        if m:
            cfg.setdefault("grpo", {})["temperature"] = _num(m.group(1), "training.grpo.temperature")
        m = _search(r"completions?\s+(?:of\s+)?(?:up to\s+|at most\s+)?" + _NUM + r"\s+tokens", clause)
        if m:
            cfg.setdefault("grpo", {})["max_completion_length"] = _int(m.group(1), "training.grpo.max_completion_length")
        if _search(r"\bq?lora\b", clause):
            cfg["lora"] = {"quantize_4bit": bool(_search(r"\bqlora\b", clause))}
        if not cfg:
            continue
        for stage in named or train_stages:
            if named or stage not in training:  # an unnamed clause fills only stages without their own
                training.setdefault(stage, {}).update(cfg)
    return training


def _gates(text: str, stages: list[str]) -> dict[str, dict[str, Any]]:
    gates: dict[str, dict[str, Any]] = {}
    train_stages = [s for s in stages if s in ("pretrain", "sft")]
    for clause in _clauses(text):
        named = [s for s in STAGE_ORDER if s in stages and _search(STAGE_WORDS[s], clause)]
        if _search(r"(?:must|may|should|does) not regress|no regression", clause):
            stage = named[-1] if named else stages[-1]
            gates[stage] = {"metric": "exact_match", "max_regression": 0.0}
            continue
        m = _search(_NUM + r"\s*%\s*(?:exact[- ]match|accuracy|correct)", clause) or _search(
            r"(?:exact[- ]match|accuracy)\s+(?:of\s+)?(?:at least\s+|>=?\s*)?" + _NUM + r"\s*(%)?", clause)
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
        return (f"request: {len(text):,} characters, over the limit of {MAX_REQUEST_CHARS:,}; say what to train, "
                "on what data and within what budget in fewer words (settings beyond that belong in a task file)")
    m = _CONTROL.search(text)
    if m:
        return (f"request: holds a control character ({ascii(m.group())[1:-1]} at position {m.start()}); "
                "write the request as plain text")
    return None


def _trust_problem(text: str) -> str | None:
    """A request may not turn trust_remote_code on (saying it stays off is fine)."""
    m = _search(_TRUST, text)
    if m is None or _search(r"\b(?:no|not|never|without|don't|do not)\s+(?:\w+\s+){0,2}$", text[max(0, m.start() - 40):m.start()]):
        return None
    return ("model.trust_remote_code: a request cannot turn it on; only your own task file can "
            "(model.trust_remote_code: true, run with execute-workflow --task)")


def _asks(text: str) -> list[str]:
    """Steps the text asks to approve: "ask … before training" (the first cue, then each step's
    phrase after it — one pass each, where ``cue.*phrase`` rescanned the rest at every cue)."""
    cue = _search(r"\b(?:ask|check with|wait for)\b", text)
    if cue is None:
        return []
    tail = text[cue.end():]
    return [step for step, pat in (("train", r"before (?:any )?train\w*"), ("register_model", r"before regist\w*"),
                                   ("curate", r"before curat\w*")) if _search(pat, tail)]


def read_request(text: str) -> Reading:
    """Extract TrainTask fields from ``text``; required fields it does not state go to ``missing``;
    a request too long, or a number no field can hold, is a problem."""
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
        r.fields = _read(text, r)
    except _BadNumber as exc:
        r.problems.append(str(exc))
    return r


def _read(text: str, r: Reading) -> dict[str, Any]:
    leaks = _search(r"\b(?:plant|inject|leak)\w*\s+" + _NUM + r"[^.;]*", text)
    if leaks:  # read first and cut out: its "20 held-out problems" must not count as the eval size
        text = text[:leaks.start()] + text[leaks.end():]
    model, data, budget = _model(text, r), _data(text, r), _budget(text, r)
    stages = [s for s in STAGE_ORDER if _search(STAGE_WORDS[s], text)]
    if model and "path" not in model and "pretrain" not in stages:
        stages.insert(0, "pretrain")  # a model built from a config starts from random init (and needs a tokenizer)
    if model and "path" in model and not stages:
        stages = ["sft"]
    if not any(s in ("pretrain", "sft") for s in stages):
        stages.insert(0, "pretrain")
    fields: dict[str, Any] = {"stages": stages}
    if model is not None:
        fields["model"] = model
    if data is not None:
        fields["data"] = data
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
    m = _search(r"vocab(?:ulary)?(?:\s+size)?(?:\s+of)?\s+" + _NUM, text)
    if m:
        fields.setdefault("tokenizer", {})["vocab_size"] = _int(m.group(1), "tokenizer.vocab_size")
    if _search(r"(?:without|no|don't|do not)\s+split\w*\s+digits|digits (?:not|un)split", text):
        fields.setdefault("tokenizer", {})["split_digits"] = False
    m = _search(r"(?:name it|call it|named|called)\s+[\"'`]?([A-Za-z0-9][\w.\-]*)", text)
    name = m.group(1).rstrip(".") if m else None
    if name is None and data:
        name = data.get("demo") or re.sub(r"[^\w.\-]", "-", str(data.get("path", "task")).rsplit("/", 1)[-1]
                                          .rsplit(".", 1)[0]) or "task"
    fields["name"] = (name or "task")[:64]
    if _search(r"\bretry\b|try again|second (?:attempt|chance)", text):
        fields["allow_retry"] = True
    asks = _asks(text)
    if asks:
        fields["require_approval"] = asks
    return fields
