"""Row-level checks for chat, prompt/completion and preference rows, and their text renderings.

Text-quality heuristics judge prose (Gopher's 50-word minimum, stop words, symbol ratios): a
short instruction row fails them all, and 150 of a user's rows became 0. Such rows get checks of
their structure instead; each is a named rule that counts the rows it removed and keeps a few
examples with the reason:

- ``empty_turn``: a prompt, or a system/user turn, or an assistant turn before the last, that is
  blank (empty or whitespace only). An assistant turn that calls tools may have no text; a tool's
  result may be empty (a command with no output).
- ``truncated``: the conversation stops before the answer it teaches: its last turn is a user,
  system or tool turn, or an assistant turn that only calls tools. (The same for a chat ``chosen``
  or ``rejected`` side.) An answer without closing punctuation, or one that seems to end
  mid-word, is *not* taken as truncated: short answers ("Paris", "42", a code line) end that way.
- ``empty_answer``: the answer is blank: a completion, the last assistant reply, ``chosen`` or
  ``rejected``.
- ``same_chosen_rejected``: a preference row whose two sides are the same text (spacing aside):
  nothing to prefer.
- ``over_length``: more tokens, counted with the task's tokenizer as training renders the row,
  than the stage trains on (its ``seq_len``): the trainer would cut it. Only with a tokenizer
  (``RowChecker(tokenizer=...)``): this module never imports one.

Exact and near duplicates and eval leaks are found by the pipeline's own stages, on two
renderings of a row made here: ``render`` (every turn but the system prompt, with its role: what
the row teaches) and ``prompt_side`` (what the user asks: the text decontamination compares;
``contents``, asked and answered, with ``leaks_on: row``).
System prompts and tool definitions are left out of both: a system prompt every row shares
would make two short, different rows near duplicates of each other, and every row a "leak".
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainteam.core.errors import BadInput
from trainteam.curation.formats import row_kind

RULES = ("empty_turn", "truncated", "empty_answer", "same_chosen_rejected", "over_length")
_SNIPPET = 100


class RowChecksConfig(BaseModel):
    """The row-level rules; a rule set to False (``max_tokens`` to None) is off."""

    model_config = ConfigDict(extra="forbid")

    empty_turn: bool = True
    truncated: bool = True
    empty_answer: bool = True
    same_chosen_rejected: bool = True
    max_tokens: int | None = Field(
        None,
        ge=1,
        description="over_length: drop rows longer than this many tokens "
        "(in a run: the seq_len of the stages that train on the rows); needs a tokenizer",
    )
    max_examples: int = Field(5, ge=0, le=1000, description="examples kept per rule in the report")
    leaks_on: Literal["prompt", "row"] = Field(
        "prompt",
        description="what decontamination compares of a row and "
        "of the eval rows: the prompt side (what is asked), or the whole "
        "row's contents (asked and answered)",
    )


class RowExample(BaseModel):
    """One row a rule removed: its id, why, and the start of its rendering."""

    id: str
    why: str
    text: str = ""


# -- renderings ----------------------------------------------------------------------------------


def _blank(value: Any) -> bool:
    return value is None or not str(value).strip()


def _turn_text(m: Mapping[str, Any]) -> str:
    content = "" if m.get("content") is None else str(m["content"])
    if m.get("tool_calls"):
        content = (content + " " if content else "") + json.dumps(m["tool_calls"], sort_keys=True, default=str)
    return f"{m.get('role', '?')}: {content}"


def _side_turns(value: Any) -> list[Mapping[str, Any]]:
    """A preference side (or a preference prompt) as turns: a string is one turn."""
    if isinstance(value, str):
        return [{"role": "assistant", "content": value}]
    return [m for m in value or [] if isinstance(m, Mapping)]


def render(row: Mapping[str, Any]) -> str:
    """The row as one text, every turn but the system prompt with its role: what exact and near
    dedup compare. A pair and the same conversation written as chat render alike."""
    kind = row_kind(row)
    if kind == "text":
        return str(row["text"])
    if kind == "pair":
        return f"user: {row['prompt']}\nassistant: {row['completion']}"
    if kind == "chat":
        return "\n".join(_turn_text(m) for m in row["messages"] if m.get("role") != "system")
    prompt = row["prompt"]
    lines = (
        [f"user: {prompt}"] if isinstance(prompt, str) else [_turn_text(m) for m in prompt if m.get("role") != "system"]
    )
    for side in ("chosen", "rejected"):
        lines += [f"{side}: " + " ".join(_turn_text(m) for m in _side_turns(row[side]))]
    return "\n".join(lines)


def prompt_side(row: Mapping[str, Any]) -> str:
    """What the row asks: the user's turns (a pair's or preference's prompt); a text row's text.
    Decontamination compares this side of training rows with the same side of eval rows."""
    kind = row_kind(row)
    if kind == "text":
        return str(row["text"])
    prompt = row["messages"] if kind == "chat" else row["prompt"]
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content") or "") for m in prompt if m.get("role") == "user")


def contents(row: Mapping[str, Any]) -> str:
    """What the row says, without roles or system prompt: its prompt side, then its answers.
    Pretraining text is decontaminated against eval rows in this form."""
    kind = row_kind(row)
    if kind == "text":
        return str(row["text"])
    if kind == "pair":
        return f"{row['prompt']}\n{row['completion']}"
    if kind == "chat":
        return "\n".join(str(m.get("content") or "") for m in row["messages"] if m.get("role") != "system")
    sides = [str(m.get("content") or "") for side in ("chosen", "rejected") for m in _side_turns(row[side])]
    return "\n".join([prompt_side(row), *sides])


def row_records(rows: Iterable[Mapping[str, Any]], source: str = "row") -> Iterator[dict]:
    """Canonical rows as the pipeline's ``{id, text, meta}`` records: ``text`` is ``render(row)``
    and ``meta`` the row's other fields, so ``row_of`` gives the curated row back unchanged."""
    for k, row in enumerate(rows):
        rid = row.get("id")
        try:
            text = render(row)
        except (ValueError, KeyError, TypeError) as exc:
            raise BadInput(f"{source}: row {k + 1}: {exc}") from None
        drop = ("id", "text") if row_kind(row) == "text" else ("id",)  # a text row's text is the record's
        yield {
            "id": str(rid) if rid is not None else f"{source}:{k + 1}",
            "text": text,
            "meta": {key: v for key, v in row.items() if key not in drop},
        }


def row_of(record: Mapping[str, Any]) -> dict:
    """The canonical row (less its id) a record of ``row_records`` holds; a text row's text is the
    record's own (a piece, when decontamination cut it)."""
    meta = dict(record.get("meta") or {})
    if any(meta.get(k) is not None for k in ("messages", "chosen", "completion")):
        return meta
    return {**meta, "text": record["text"]}


# -- structure -----------------------------------------------------------------------------------

# An output tool: calling it IS the answer (pydantic-ai's structured output, as compact persona rows end).
ANSWER_TOOLS = ("final_result",)


def _answers(calls: Sequence[Mapping[str, Any]]) -> bool:
    fn = (calls[-1] or {}).get("function") or {}
    return fn.get("name") in ANSWER_TOOLS and bool(fn.get("arguments"))


def _answer_problem(turns: Sequence[Mapping[str, Any]], what: str) -> tuple[str, str] | None:
    """The rule a conversation (or a chat preference side) breaks at its end, if any."""
    if not turns:
        return "empty_answer", f"{what} has no turns"
    last = turns[-1]
    role = last.get("role")
    if role != "assistant":
        return "truncated", f"{what} ends on a {role} turn (turn {len(turns)}), before the answer"
    if last.get("tool_calls") and _blank(last.get("content")):
        if _answers(last["tool_calls"]):
            return None
        return "truncated", f"{what} ends on an assistant tool call (turn {len(turns)}), before the answer"
    if _blank(last.get("content")):
        return "empty_answer", f"{what}: the last assistant reply (turn {len(turns)}) is blank"
    return None


def _blank_turn(turns: Sequence[Mapping[str, Any]], upto: int) -> tuple[str, str] | None:
    for i, m in enumerate(turns[:upto]):
        role = m.get("role")
        if role == "tool" or (role == "assistant" and m.get("tool_calls")):
            continue
        if _blank(m.get("content")):
            return "empty_turn", f"turn {i + 1} ({role}) is blank"
    return None


def _chat_problems(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    msgs = [m for m in row["messages"] if isinstance(m, Mapping)]
    found = [_blank_turn(msgs, len(msgs) - 1), _answer_problem(msgs, "the conversation")]
    return [p for p in found if p]


def _pair_problems(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    found = []
    if _blank(row["prompt"]):
        found.append(("empty_turn", "the prompt is blank"))
    if "system" in row and row["system"] is not None and _blank(row["system"]):
        found.append(("empty_turn", "the system prompt is blank"))
    if _blank(row["completion"]):
        found.append(("empty_answer", "the completion is blank"))
    return found


def _side_problem(value: Any, side: str) -> tuple[str, str] | None:
    if isinstance(value, str):
        return ("empty_answer", f"{side} is blank") if _blank(value) else None
    turns = _side_turns(value)
    return _blank_turn(turns, len(turns) - 1) or _answer_problem(turns, side)


def _same(a: Any, b: Any) -> bool:
    def norm(v: Any) -> str:
        return " ".join(" ".join(_turn_text(m) for m in _side_turns(v)).split())

    return norm(a) == norm(b)


def _preference_problems(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    prompt = row["prompt"]
    found: list[tuple[str, str] | None] = []
    if isinstance(prompt, str):
        if _blank(prompt):
            found.append(("empty_turn", "the prompt is blank"))
    else:
        found.append(_blank_turn(_side_turns(prompt), len(prompt)))
    found += [_side_problem(row["chosen"], "chosen"), _side_problem(row["rejected"], "rejected")]
    if _same(row["chosen"], row["rejected"]):
        found.append(("same_chosen_rejected", "chosen and rejected are the same text"))
    return [p for p in found if p]


def problems(row: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every (rule, why) of the structural rules the row breaks, in ``RULES`` order of checking."""
    kind = row_kind(row)
    if kind == "text":
        return [("empty_turn", "the text is blank")] if _blank(row["text"]) else []
    if kind == "pair":
        return _pair_problems(row)
    if kind == "chat":
        return _chat_problems(row)
    return _preference_problems(row)


# -- tokens --------------------------------------------------------------------------------------


def _as_turns(prompt: Any, system: Any) -> list[dict]:
    if isinstance(prompt, str):
        return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    return [{k: v for k, v in m.items() if v is not None} for m in prompt]


def _answer_turns(value: Any) -> list[dict]:
    return (
        [{"role": "assistant", "content": value}]
        if isinstance(value, str)
        else [{k: v for k, v in m.items() if v is not None} for m in value]
    )


def conversations(row: Mapping[str, Any]) -> list[list[dict]]:
    """The conversations training reads of a row, through its last assistant reply (a
    preference row: the prompt with each side)."""
    kind = row_kind(row)
    if kind == "text":
        return []
    if kind == "chat":
        msgs = [{k: v for k, v in m.items() if v is not None} for m in row["messages"]]
        last = max((i for i, m in enumerate(msgs) if m.get("role") == "assistant"), default=len(msgs) - 1)
        return [msgs[: last + 1]]
    prompt = _as_turns(row["prompt"], row.get("system"))
    if kind == "pair":
        return [prompt + _answer_turns(str(row["completion"]))]
    return [prompt + _answer_turns(row[side]) for side in ("chosen", "rejected")]


def _plain_text(tokenizer, conv: list[dict]) -> str:
    """A conversation as a model without a chat template reads it: bos + the prompt's turns, one
    per line, then the answer and eos (``formats.prompt_text`` / ``completion_text``, plain)."""
    sep = tokenizer.bos_token or tokenizer.eos_token or ""
    *prompt, answer = conv
    return (
        sep
        + "\n".join(str(m.get("content") or "") for m in prompt)
        + str(answer.get("content") or "")
        + (tokenizer.eos_token or "")
    )


def token_lengths(tokenizer, rows: Sequence[Mapping[str, Any]]) -> list[int]:
    """Each row's tokens as training renders it: the chat template when the tokenizer has one,
    else the plain format; a text row's text; the longer side of a preference row."""
    chat = bool(getattr(tokenizer, "chat_template", None))
    texts: list[str] = []
    owner: list[int] = []
    for k, row in enumerate(rows):
        convs = conversations(row)
        if not convs:
            texts.append(str(row.get("text") or ""))
            owner.append(k)
        for conv in convs:
            texts.append(
                tokenizer.apply_chat_template(conv, tools=row.get("tools"), tokenize=False)
                if chat
                else _plain_text(tokenizer, conv)
            )
            owner.append(k)
    ids = tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
    out = [0] * len(rows)
    for k, seq in zip(owner, ids, strict=True):
        out[k] = max(out[k], len(seq))
    return out


# -- the checker ---------------------------------------------------------------------------------


class RowChecker:
    """Applies the configured rules to batches of rows; ``dropped[rule]`` counts what each
    removed (a row counts once, under the first rule it breaks) and ``examples[rule]`` lists a few."""

    def __init__(self, config: RowChecksConfig | None = None, tokenizer: Any = None):
        self.config = config or RowChecksConfig()
        c = self.config
        if c.max_tokens is not None and tokenizer is None:
            raise BadInput(
                "curation.rows.max_tokens: over-length rows are counted with the task's tokenizer, "
                "and there is none to count with (set max_tokens: null)"
            )
        self.tokenizer = tokenizer
        self.rules = [r for r in RULES if (getattr(c, r) if r != "over_length" else c.max_tokens is not None)]
        self.dropped: dict[str, int] = dict.fromkeys(self.rules, 0)
        self.examples: dict[str, list[RowExample]] = {r: [] for r in self.rules}

    def _drop(self, rule: str, rid: str, why: str, row: Mapping[str, Any]) -> None:
        self.dropped[rule] += 1
        if len(self.examples[rule]) < self.config.max_examples:
            self.examples[rule].append(RowExample(id=rid, why=why, text=render(row)[:_SNIPPET]))

    def batch(self, ids: Sequence[str], rows: Sequence[Mapping[str, Any]]) -> list[bool]:
        """Keep/drop verdicts for a batch of rows, counted per rule."""
        keep = [True] * len(rows)
        for k, (rid, row) in enumerate(zip(ids, rows, strict=True)):
            broken = next(((r, why) for r, why in problems(row) if r in self.dropped), None)
            if broken is not None:
                keep[k] = False
                self._drop(broken[0], rid, broken[1], row)
        limit = self.config.max_tokens
        if limit is not None:
            alive = [k for k, ok in enumerate(keep) if ok]
            for k, n in zip(alive, token_lengths(self.tokenizer, [rows[k] for k in alive]), strict=True):
                if n > limit:
                    keep[k] = False
                    self._drop("over_length", ids[k], f"{n} tokens > {limit} (the stage's seq_len)", rows[k])
        return keep
