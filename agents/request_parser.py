"""The offline orchestrator's reading of a request: sentence → TrainTask fields, or what is missing.

Rule-based and conservative on purpose. It extracts only what the text states; model,
data and budget are never filled in: when one is absent the result names it. Data
paths are taken verbatim from the text (never guessed), and nothing is downloaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

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
_NUM = r"(\d+(?:[,_]\d{3})*(?:\.\d+)?(?:e-?\d+)?)"
_PATH = r"((?:~|\.{1,2}|/)?[\w.\-~]*/[\w.\-/~]+|[\w.\-~]+\.jsonl?)"


def _num(s: str) -> float:
    return float(s.replace(",", "").replace("_", ""))


def _int(s: str) -> int:
    return int(_num(s))


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
    m = _search(r"(\d+(?:\.\d+)?)\s*([kmb])(?:illion)?[- ]?param", text) or _search(
        r"(\d+(?:\.\d+)?)\s*([kmb])\b[- ](?:model|llama|qwen|gpt)", text)
    if m:
        from trainteam.trainers.planning.plan import model_shape

        n = int(float(m.group(1)) * {"k": 1e3, "m": 1e6, "b": 1e9}[m.group(2).lower()])
        shape, _ = model_shape(n)
        if n >= 5e6:  # a tiny count keeps the size word's (or default) shape; big ones take the planner's
            spec.update(hidden_size=shape.hidden_size, num_layers=shape.num_layers, num_heads=shape.num_heads)
        found = True
    for key, pat in (("hidden_size", r"hidden(?:[ _]size)?(?:\s+of)?\s+(\d+)|(\d+)[- ]hidden"),
                     ("num_layers", r"(\d+)\s+(?:transformer\s+)?layers?\b|layers?\s*[:=]?\s*(\d+)"),
                     ("num_heads", r"(\d+)\s+(?:attention\s+)?heads?\b|heads?\s*[:=]?\s*(\d+)"),
                     ("max_position_embeddings", r"context(?:\s+(?:length|window|of))?\s+(\d+)|(\d+)[- ]token context")):
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
    ev = _search(r"(?:eval\w*|held[- ]out|test)\s+(?:on|set|data|file|with|at)?\s*(?:on|at|in)?\s*" + _PATH, text)
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
            r"(?:held[- ]out|eval\w*|test)(?:\s+set)?\s+(?:of\s+)?" + _NUM + r"\b(?!\s*%)", text)
        if m:
            data["n_eval"] = _int(m.group(1))
        m = _search(_NUM + r"\s+(?:training\s+|train\s+)?(?:addition\s+|arithmetic\s+)?(?:problems|examples|rows|samples)",
                    text)
        if m and (m.end() < len(text)) and not (data.get("n_eval") == _int(m.group(1)) and "held" in text[m.end():m.end() + 10]):
            data["n_train"] = _int(m.group(1))
        m = _search(r"(?:operands?|numbers?)\s+(?:up to|below|under|<=?)\s+" + _NUM, text)
        if m:
            data["max_operand"] = _int(m.group(1))
        else:
            m = _search(r"\b(single|one|two|three|four)[- ]digit", text)
            if m:
                data["max_operand"] = DIGITS[m.group(1).lower()]
        m = _search(r"\bseed\s+(\d+)", text)
        if m:
            data["seed"] = int(m.group(1))
    return data


def _budget(text: str, r: Reading) -> dict[str, Any] | None:
    if _search(r"no budget|unlimited|whatever it takes|no (?:time )?limit", text):
        r.problems.append("budget: a run never spends without a ceiling; give a time limit (e.g. 'budget 20 minutes')")
        return None
    budget: dict[str, Any] = {}
    rest = text
    m = _search(r"\$?\s*" + _NUM + r"\s*(?:\$|usd|dollars)?\s*(?:/|an?|per)\s*(?:hour|hr|h)\b", rest)
    if m:
        budget["cost_per_hour_usd"] = _num(m.group(1))
        rest = rest[:m.start()] + rest[m.end():]
    m = _search(r"\$\s*" + _NUM, rest) or _search(_NUM + r"\s*(?:usd|dollars)\b", rest)
    if m:
        budget["max_cost_usd"] = _num(m.group(1))
    durations = list(re.finditer(_NUM + r"\s*(minutes?|mins?|hours?|hrs?|h)\b", rest, re.IGNORECASE))
    if durations:
        cue = r"(?:budget|within|under|at most|max(?:imum)?|limit|no more than|cap|in)\W*(?:of\s+)?(?:\w+\s+){0,2}$"
        chosen = next((d for d in durations if re.search(cue, rest[max(0, d.start() - 30):d.start()], re.I)),
                      durations[0])
        value, unit = _num(chosen.group(1)), chosen.group(2).lower()
        budget["max_wall_minutes"] = value * 60 if unit.startswith("h") else value
    elif "max_cost_usd" in budget and budget.get("cost_per_hour_usd"):
        budget["max_wall_minutes"] = budget["max_cost_usd"] / budget["cost_per_hour_usd"] * 60
        r.notes.append("budget: time limit derived from the money and the hourly price")
    elif "max_cost_usd" in budget:
        r.problems.append("budget.max_wall_minutes: give a time limit or the hourly price with the money budget")
        return None
    else:
        r.missing.append("budget")
        return None
    return budget


def _clauses(text: str) -> list[str]:
    return [c for c in re.split(r"[.;]\s+|[.;]$|,?\s+then\s+|\band then\b", text) if c.strip()]


def _training(text: str, stages: list[str]) -> dict[str, dict[str, Any]]:
    training: dict[str, dict[str, Any]] = {}
    train_stages = [s for s in stages]
    for clause in _clauses(text):
        named = [s for s in STAGE_ORDER if s in stages and _search(STAGE_WORDS[s], clause)]
        cfg: dict[str, Any] = {}
        m = _search(r"(?:checkpoint|save)\w*\s+every\s+" + _NUM + r"\s+steps", clause)
        if m:
            cfg["save_steps"] = _int(m.group(1))
            clause = clause[:m.start()] + clause[m.end():]
        if _search(r"\b(?:no|without)\s+(?:gradient\s+|grad\s+)?clipping\b", clause):
            cfg["max_grad_norm"] = 1e9  # TrainConfig has no "off": a norm no gradient reaches
        m = _search(r"warm[- ]?(?:ing )?up(?:\s+(?:of|for|over))?\s+" + _NUM + r"\s+steps", clause)
        if m:
            cfg["warmup_steps"] = _int(m.group(1))
            clause = clause[:m.start()] + clause[m.end():]
        for key, pat, conv in (("max_steps", _NUM + r"\s+(?:[a-z-]+\s+)?steps\b", _int),
                               ("per_device_batch_size", r"batch(?:\s+size)?(?:\s+of)?\s+" + _NUM, _int),
                               ("learning_rate", r"(?:learning rate|\blr)(?:\s+of)?\s*=?\s*" + _NUM, _num),
                               ("seq_len", r"(?:sequence length|seq(?:uence)?[_ ]len\w*)(?:\s+of)?\s+" + _NUM, _int)):
            m = _search(pat, clause)
            if m:
                cfg[key] = conv(m.group(1))
        m = _search(_NUM + r"\s+generations", clause)
        if m:
            cfg.setdefault("grpo", {})["num_generations"] = _int(m.group(1))
        m = _search(r"(?:sampling\s+)?temperature(?:\s+of)?\s*=?\s*" + _NUM, clause)
        if m:
            cfg.setdefault("grpo", {})["temperature"] = _num(m.group(1))
        m = _search(r"completions?\s+(?:of\s+)?(?:up to\s+|at most\s+)?" + _NUM + r"\s+tokens", clause)
        if m:
            cfg.setdefault("grpo", {})["max_completion_length"] = _int(m.group(1))
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
        value = _num(m.group(1))
        pct = "%" in m.group(0)
        stage = named[-1] if named else (train_stages[-1] if train_stages else stages[-1])
        gates[stage] = {"metric": "exact_match", "min": value / 100 if pct or value > 1 else value}
    return gates


def read_request(text: str) -> Reading:
    """Extract TrainTask fields from ``text``; required fields it does not state go to ``missing``."""
    r = Reading()
    text = " ".join(text.split())
    if not text:
        r.missing += ["model", "data", "budget"]
        return r
    leaks = _search(r"(?:plant|inject|leak)\w*\s+" + _NUM + r"[^.;]*", text)
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
            data["inject_leaks"] = _int(leaks.group(1))
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
        fields.setdefault("tokenizer", {})["vocab_size"] = _int(m.group(1))
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
    asks = [step for step, pat in (("train", r"before (?:any )?train\w*"), ("register_model", r"before regist\w*"),
                                   ("curate", r"before curat\w*")) if _search(r"(?:ask|check with|wait for)\b.*" + pat, text)]
    if asks:
        fields["require_approval"] = asks
    r.fields = fields
    return r
