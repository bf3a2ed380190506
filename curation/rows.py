"""A user's data as canonical rows: the four shapes everything downstream reads.

``iter_rows`` / ``read_rows`` read any source ``curation.sources.iter_items`` reads (JSON
Lines, JSON, CSV/TSV, Parquet, text, a ``datasets`` saved folder, a folder of data files)
and give each row in one shape (``curation.formats.row_kind`` names it):

- **text** ``{"text"}``, from a ``text`` column (or a line of a ``.txt`` file);
- **pair** ``{"prompt", "completion", "system"?}``, from ``prompt``/``completion``, and
  from the usual other names: Alpaca ``instruction`` (+ ``input`` or ``context``, appended
  after a blank line) with ``output``; ``question``/``answer``; ``prompt``/``response``;
- **chat** ``{"messages": [{role, content, tool_calls?, name?, tool_call_id?}], "tools"?}``,
  from ``messages`` (OpenAI turns) or ShareGPT ``conversations`` (``from``/``value``; roles
  ``human``/``gpt``/``system``/``tool``...), with an optional ``system`` column (a leading
  system turn) and ``tools``; also TRL's conversational prompt/completion (lists of turns).
  A cell holding the turns as JSON text (CSV, or a string column) is parsed;
- **preference** ``{"prompt", "chosen", "rejected", "system"?}``: ``chosen``/``rejected``
  both strings or both lists of turns; without a ``prompt`` column, the turns the two share
  at their start are the prompt (as in TRL's implicit-prompt format).

``columns`` renames a user's columns first (canonical name -> the user's column, as a task's
``data.columns`` writes it). Other columns are kept unchanged at top level (``id``,
``label``...); the columns a shape was read from, and canonical names of other shapes, are
not. A row that fits no shape, or a bad cell, is one ``BadInput`` line naming the file, the
row and the column: ``train.parquet: row 12: column 'messages': turn 2 has no 'content'``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from itertools import islice
from typing import Any, NoReturn, cast

from trainteam.core.errors import BadInput
from trainteam.curation.formats import RowKind
from trainteam.curation.sources import MAX_ROW_BYTES, iter_items

COLUMNS = ("text", "prompt", "completion", "messages", "system", "chosen", "rejected", "tools")
PROMPT_NAMES = ("prompt", "instruction", "question")
COMPLETION_NAMES = ("completion", "output", "response", "answer")
ROLES = {
    "system": "system",
    "user": "user",
    "human": "user",
    "assistant": "assistant",
    "gpt": "assistant",
    "bot": "assistant",
    "model": "assistant",
    "chatgpt": "assistant",
    "function_call": "assistant",
    "tool": "tool",
    "function": "tool",
    "observation": "tool",
    "ipython": "tool",
}
# Names no extra column keeps: they belong to a shape (read, or of another shape).
_SHAPE_NAMES = (*COLUMNS, "conversations")
_LIST_COLUMNS = ("messages", "conversations", "tools")  # an empty string there is an empty cell


@dataclass(frozen=True)
class Row:
    """One canonical row, its shape and where it was read (for errors about it)."""

    kind: RowKind
    record: dict[str, Any]
    where: str


def check_columns(columns: Mapping[str, str]) -> None:
    """A column mapping names canonical columns, each from a distinct column of the user's (ValueError)."""
    for canon, user in columns.items():
        if canon not in COLUMNS:
            raise ValueError(f"{canon!r} is not a canonical column ({', '.join(COLUMNS)})")
        if not isinstance(user, str) or not user:
            raise ValueError(f"{canon}: give the name of one of your columns")
    users = list(columns.values())
    dup = next((u for u in users if users.count(u) > 1), None)
    if dup is not None:
        raise ValueError(f"column {dup!r} is mapped twice")


def iter_rows(
    source: Any,
    *,
    columns: Mapping[str, str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    max_row_bytes: int | None = MAX_ROW_BYTES,
) -> Iterator[Row]:
    """Every row of ``source`` (a path, or records in memory) as a canonical ``Row``, in order;
    ``split`` picks one split of a source that has several; ``limit`` stops after that many. A
    source with no row, or a row over ``max_row_bytes``, is one ``BadInput`` line (``iter_items``)."""
    if columns:
        try:
            check_columns(columns)
        except ValueError as exc:
            raise BadInput(f"columns: {exc}") from None
    items = iter_items(source, split=split, max_row_bytes=max_row_bytes)
    for where, _, raw in items if limit is None else islice(items, limit):
        yield canonical_row(raw, where, columns)


def read_rows(
    source: Any,
    *,
    columns: Mapping[str, str] | None = None,
    split: str | None = None,
    limit: int | None = None,
    max_row_bytes: int | None = MAX_ROW_BYTES,
) -> list[dict[str, Any]]:
    """The canonical records of ``source`` (a sample of the first ``limit`` with ``limit``)."""
    return [r.record for r in iter_rows(source, columns=columns, split=split, limit=limit, max_row_bytes=max_row_bytes)]


class _Cells:
    """A row's cells under canonical names, and the user's name of each (for errors)."""

    def __init__(self, raw: dict, columns: Mapping[str, str] | None, where: str):
        self.where = where
        self.names: dict[str, str] = {}
        self.rec = dict(raw)
        moved = {}
        for canon, user in (columns or {}).items():
            if user == canon:
                continue
            if user not in raw:
                raise BadInput(f"{where}: column {user!r} (mapped to {canon}) is missing; found {sorted(raw)[:8]}")
            moved[canon] = self.rec.pop(user)
            self.names[canon] = user
        self.rec.update(moved)
        self.used: set[str] = set()

    def has(self, col: str) -> bool:
        """A table gives every row each column, None where unset (a CSV: an empty cell)."""
        value = self.rec.get(col)
        return value is not None and not (value == "" and col in _LIST_COLUMNS)

    def first(self, names: tuple[str, ...]) -> str | None:
        return next((c for c in names if self.has(c)), None)

    def fail(self, col: str, reason: str) -> NoReturn:
        raise BadInput(f"{self.where}: column {self.names.get(col, col)!r}: {reason}")

    def missing(self, col: str, why: str) -> NoReturn:
        raise BadInput(f"{self.where}: column {self.names.get(col, col)!r} is missing: {why}")

    def take(self, col: str) -> Any:
        self.used.add(col)
        return self.rec.get(col)

    def string(self, col: str) -> str:
        value = self.take(col)
        if not isinstance(value, str):
            self.fail(col, f"not a string ({type(value).__name__})")
        return value

    def optional_string(self, col: str) -> str | None:
        if not self.has(col):
            self.used.add(col)
            return None
        return self.string(col) or None

    def extras(self) -> dict[str, Any]:
        return {k: v for k, v in self.rec.items() if k not in self.used and k not in _SHAPE_NAMES}


def canonical_row(raw: Any, where: str, columns: Mapping[str, str] | None = None) -> Row:
    """One raw row (a mapping of columns, or a line of text) in its canonical shape."""
    if isinstance(raw, str):
        return Row("text", {"text": raw}, where)
    if not isinstance(raw, dict):
        raise BadInput(f"{where}: expected an object of named columns, got {type(raw).__name__}")
    cells = _Cells(raw, columns, where)
    kind: RowKind
    if cells.has("chosen") or cells.has("rejected"):
        kind, record = "preference", _preference(cells)
    elif cells.has("messages") or cells.has("conversations"):
        kind, record = "chat", _chat(cells, "messages" if cells.has("messages") else "conversations")
    elif cells.first(PROMPT_NAMES) and (cells.first(COMPLETION_NAMES) or not cells.has("text")):
        kind, record = _pair(cells)
    elif cells.has("text"):
        kind, record = "text", {"text": cells.string("text")}
    else:
        raise BadInput(
            f"{where}: no column to read a row from: expected text, prompt/completion, messages "
            f"(or conversations) or chosen/rejected; found {sorted(raw)[:8]} (map yours with data.columns)"
        )
    return Row(kind, {**record, **cells.extras()}, where)


# -- shapes -------------------------------------------------------------------------------------


def _prompt(cells: _Cells, col: str) -> str:
    """The prompt text: Alpaca's ``instruction`` gets its ``input`` (or ``context``) after a blank line."""
    prompt = cells.string(col)
    if col == "instruction":
        extra_col = cells.first(("input", "context"))
        extra = cells.optional_string(extra_col) if extra_col else None
        cells.used.add("input")  # Alpaca's empty input column is not an extra
        if extra:
            prompt = f"{prompt}\n\n{extra}"
    return prompt


def _pair(cells: _Cells) -> tuple[RowKind, dict]:
    p_col = cells.first(PROMPT_NAMES)
    c_col = cells.first(COMPLETION_NAMES)
    assert p_col is not None  # canonical_row reads a pair only where a prompt column is
    if c_col is None:
        cells.missing("completion", "a prompt needs its completion (or output, response, answer)")
    prompt, completion = cells.rec[p_col], cells.rec[c_col]
    if isinstance(prompt, list) or isinstance(completion, list):  # TRL's conversational prompt/completion
        turns = (
            _turns(cells, p_col) if isinstance(prompt, list) else [{"role": "user", "content": _prompt(cells, p_col)}]
        )
        answer = (
            _turns(cells, c_col)
            if isinstance(completion, list)
            else [{"role": "assistant", "content": cells.string(c_col)}]
        )
        return "chat", _with_system(cells, {"messages": turns + answer})
    record = {"prompt": _prompt(cells, p_col), "completion": cells.string(c_col)}
    system = cells.optional_string("system")
    return "pair", {**record, "system": system} if system else record


def _chat(cells: _Cells, col: str) -> dict:
    return _with_system(cells, {"messages": _turns(cells, col)})


def _with_system(cells: _Cells, record: dict) -> dict:
    """A ``system`` column as the leading system turn; ``tools`` as the conversation's tool schemas."""
    msgs = record["messages"]
    system = cells.optional_string("system")
    if system is not None:
        if msgs[0]["role"] != "system":
            msgs.insert(0, {"role": "system", "content": system})
        elif msgs[0]["content"] != system:
            cells.fail("system", "the conversation already starts with another system turn")
    if cells.has("tools"):
        record["tools"] = _tools(cells)
    else:
        cells.used.add("tools")
    return record


def _preference(cells: _Cells) -> dict:
    for col in ("chosen", "rejected"):
        if not cells.has(col):
            cells.missing(col, "a preference row needs both chosen and rejected")
    as_turns = isinstance(cells.rec["chosen"], list)
    if as_turns != isinstance(cells.rec["rejected"], list):
        cells.fail("rejected", "chosen and rejected must both be strings or both be lists of turns")
    chosen, rejected = (_turns(cells, c) if as_turns else cells.string(c) for c in ("chosen", "rejected"))
    p_col = cells.first(PROMPT_NAMES)
    if p_col is not None:
        prompt = _turns(cells, p_col) if isinstance(cells.rec[p_col], list) else _prompt(cells, p_col)
    elif as_turns:
        prompt, chosen, rejected = _shared_start(cells, cast(list, chosen), cast(list, rejected))  # as_turns
    else:
        cells.missing("prompt", "plain-text chosen/rejected answers need the prompt they answer")
    record = {"prompt": prompt, "chosen": chosen, "rejected": rejected}
    system = cells.optional_string("system")
    return {**record, "system": system} if system else record


def _shared_start(cells: _Cells, chosen: list, rejected: list) -> tuple[list, list, list]:
    """TRL's implicit prompt: the turns chosen and rejected share at their start."""
    k = 0
    while k < min(len(chosen), len(rejected)) - 1 and chosen[k] == rejected[k]:
        k += 1
    if k == 0:
        cells.missing("prompt", "chosen and rejected share no leading turns to take it from")
    return chosen[:k], chosen[k:], rejected[k:]


# -- turns --------------------------------------------------------------------------------------


def _turns(cells: _Cells, col: str) -> list[dict]:
    value = cells.take(col)
    if isinstance(value, str) and col in ("messages", "conversations"):
        value = _json_cell(cells, col, value)
    if not isinstance(value, list) or not value:
        cells.fail(col, f"expected a non-empty list of turns, got {type(value).__name__ if value else 'none'}")
    return [_turn(cells, col, i, t) for i, t in enumerate(value, 1)]


def _json_cell(cells: _Cells, col: str, value: str) -> Any:
    try:
        return json.loads(value)
    except ValueError as exc:
        cells.fail(col, f"a string that is not JSON turns ({exc})")


def _turn(cells: _Cells, col: str, n: int, t: Any) -> dict:
    if not isinstance(t, dict):
        cells.fail(col, f"turn {n} is {type(t).__name__}, not an object with role and content")
    role = t.get("role") if t.get("role") is not None else t.get("from")
    if role is None:
        cells.fail(col, f"turn {n} has no 'role' (or ShareGPT 'from')")
    canon = ROLES.get(str(role).lower())
    if canon is None:
        cells.fail(col, f"turn {n}: unknown role {role!r} (system, user, assistant, tool; ShareGPT human, gpt)")
    content = t.get("content") if t.get("content") is not None else t.get("value")
    calls = t.get("tool_calls")
    if content is None and not calls:
        cells.fail(col, f"turn {n} has no 'content'")
    msg: dict[str, Any] = {"role": canon, "content": _content(cells, col, n, content)}
    if calls is not None:
        msg["tool_calls"] = _tool_calls(cells, col, n, calls)
    for key in ("name", "tool_call_id"):
        if t.get(key) is not None:
            if not isinstance(t[key], str):
                cells.fail(col, f"turn {n}: {key!r} is {type(t[key]).__name__}, not a string")
            msg[key] = t[key]
    return msg


def _content(cells: _Cells, col: str, n: int, content: Any) -> str:
    """A turn's text: a string, or a list of ``{"type": "text", "text": ...}`` parts joined."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    cells.fail(col, f"turn {n}: 'content' is {type(content).__name__}, not text")


def _tool_calls(cells: _Cells, col: str, n: int, calls: Any) -> list[dict]:
    """Tool calls as ``{"type": "function", "function": {"name", "arguments"}}`` (a flat
    ``{"name", "arguments"}`` is wrapped; arguments given as JSON text become an object)."""
    if not isinstance(calls, list):
        cells.fail(col, f"turn {n}: 'tool_calls' is {type(calls).__name__}, not a list")
    out = []
    for c in calls:
        fn = c.get("function") if isinstance(c, dict) and isinstance(c.get("function"), dict) else c
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            cells.fail(col, f"turn {n}: a tool call without a function name")
        args = fn.get("arguments")
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except ValueError:
                pass  # free text arguments stay as written
        call = {"type": "function", "function": {"name": fn["name"], "arguments": {} if args is None else args}}
        if isinstance(c, dict) and c.get("id") is not None:
            call["id"] = c["id"]
        out.append(call)
    return out


def _tools(cells: _Cells) -> list[dict]:
    value = cells.take("tools")
    if isinstance(value, str):
        value = _json_cell(cells, "tools", value)
    if not isinstance(value, list) or not all(isinstance(t, dict) for t in value):
        cells.fail("tools", "expected a list of tool schemas (objects)")
    return value
