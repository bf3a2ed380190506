"""Secret redaction for everything trainteam persists or prints (task texts, errors, DBOS inputs and
outputs, reports, transcripts, the graph, pending approvals, the CLI's lines and JSON).

A key a person pastes into a task's description, or one a provider echoes back in its 401, must not
reach a database, a file or a terminal. Three nets, because no single one catches every key:

* known values, wherever they appear: secret-named environment variables (``*_KEY``, ``*_TOKEN``,
  ``*_SECRET``, ``*PASSWORD*``), the keys ``providers`` handed to a model in this process
  (``remember``), and the system keyring's entries for trainteam (service ``trainteam``, the users
  ``providers._api_key`` reads) when ``keyring`` is installed and usable;
* key-shaped strings (``sk-…``, ``ghp_…``, ``hf_…``, ``xox…-``, ``AKIA…``, ``AIza…``, bearer
  tokens), even from a data record rather than the environment;
* assignments to secret names (``api_key=…``, ``"token": "…"``, ``Authorization: Basic …``,
  ``MY_SERVICE_TOKEN=…``): the value is masked, the name kept, so a reader still sees what was there.

It runs on every stored string, so it stays linear and cheap: a substring test per known value, one
pattern for the shapes and one anchored on the separators `=`/`:` (the name before one is checked in
Python; a case-insensitive alternation of names took ~175 ms a MB). 1 MB of prose, JSON or paths takes
10-35 ms on this CPU, 1 MB of nothing but assignments ~80 ms (tests/contract/test_redaction.py measures
it). Shapes are anchored so ordinary text (paths, run ids, hashes, numbers) is left alone.
"""

from __future__ import annotations

import importlib.util
import os
import re
from functools import lru_cache
from typing import Any

from trainteam.core.errors import BadInput

MARK = "[REDACTED]"
KEYRING_SERVICE = "trainteam"
KEYRING_USERS = ("default", "data_curator", "training_engineer", "eval_judge", "ml_orchestrator")
_SECRET_NAME = re.compile(r"(_KEY|_TOKEN|_SECRET|PASSWORD|PASSWD|_PAT)$|API_KEY|SECRET", re.IGNORECASE)
_MIN_SECRET_LEN = 6  # shorter values ("1", "true") would redact ordinary text

_NO_WORD_BEFORE = r"(?<![A-Za-z0-9])"
_SHAPES = (
    r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{12,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|hf_[A-Za-z0-9]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_\-]{30,}"
    r"|(?i:bearer)\s+[A-Za-z0-9._\-]{16,}"
)
# An assignment: a separator (`=` or `:`, as in YAML, JSON, env files, headers), then a value; the
# secret name is checked just before the separator (anchoring on the separator keeps the scan fast).
# A value stops at separators and quotes, so a masked one never swallows a later assignment.
_ASSIGNED = re.compile(
    r"[:=](?<=[A-Za-z\"' ][:=])(?P<gap>\s*[\"']?(?:(?i:bearer|basic|token|digest)\s+)?)"
    r"(?P<value>[^\s\"',;:=&?{}\[\]()<>]{8,}=*)"
)  # =*: base64 padding
_WORD_REVERSED = re.compile(r"[\"']?[\w-]+")  # the name before a separator, read backwards
_NAMES = tuple(
    f"{a}{sep}{b}"
    for a, b in (
        ("api", "key"),
        ("access", "key"),
        ("secret", "key"),
        ("client", "secret"),
        ("access", "token"),
        ("auth", "token"),
        ("refresh", "token"),
        ("session", "token"),
        ("api", "token"),
        ("id", "token"),
    )
    for sep in ("_", "-", "")
) + ("authorization", "secret", "password", "passwd")
_ENV_NAMES = ("_TOKEN", "_KEY", "_SECRET", "_PAT")  # MY_SERVICE_TOKEN=..., as in an env file
_TOKEN_LIKE = re.compile(r"[A-Za-z0-9._~+/\-]{16,}")  # what a bare `token:` must be followed by
_SHAPE = re.compile(rf"{_NO_WORD_BEFORE}(?:{_SHAPES})")
_NAME_WINDOW = 48
_REMEMBERED: frozenset[str] = frozenset()  # replaced, never mutated: threads read it while another adds


def remember(value: str | None) -> None:
    """A secret this process uses (a provider key): masked wherever it shows up from now on."""
    global _REMEMBERED
    if value and len(value) >= _MIN_SECRET_LEN and value not in _REMEMBERED:
        _REMEMBERED = _REMEMBERED | {value}


def _provider_configured() -> bool:
    return any(
        k.startswith("TRAINTEAM_MODEL")
        and not k.startswith("TRAINTEAM_MODEL_BASE_URL")
        and v.strip() not in ("", "offline")
        for k, v in os.environ.items()
    )


@lru_cache(maxsize=1)
def keyring_values() -> tuple[str, ...]:
    """trainteam's keyring entries, read once per process; none when keyring is absent or unusable,
    or when no persona is set to a provider (then no key of the keyring was read by this process, and
    a short command never wakes a desktop keyring — it may ask to be unlocked)."""
    if importlib.util.find_spec("keyring") is None or not _provider_configured():
        return ()
    try:
        import keyring

        found = (keyring.get_password(KEYRING_SERVICE, user) for user in KEYRING_USERS)
        return tuple(v for v in found if v and len(v) >= _MIN_SECRET_LEN)
    except Exception:  # a locked or absent backend holds nothing we could leak
        return ()


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if _SECRET_NAME.search(k) and v and len(v) >= _MIN_SECRET_LEN}
    values |= _REMEMBERED
    values.update(keyring_values())
    return sorted(values, key=len, reverse=True)  # longest first: a key containing another is fully masked


def _secret_name(head: str, value: str) -> bool:
    """Whether the text just before a separator ends with a secret's name (`api_key`, `"token"`, ...)."""
    word = _WORD_REVERSED.match(head[::-1].lstrip())
    if word is None:
        return False
    name = word.group(0).strip("\"'")[::-1]
    lower = name.lower()
    if lower == "token":  # bare `token:` is common prose; only before a token-like value
        return _TOKEN_LIKE.fullmatch(value) is not None
    return lower.endswith(_NAMES) or (name.isupper() and name.endswith(_ENV_NAMES))


def _assignment(match: re.Match) -> str:
    text, sep = match.string, match.start()
    if not _secret_name(text[max(0, sep - _NAME_WINDOW) : sep], match.group("value")):
        return match.group(0)
    return text[sep] + match.group("gap") + MARK


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    for value in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, MARK)
    if "=" in text or ":" in text:
        text = _ASSIGNED.sub(_assignment, text)
    return _SHAPE.sub(MARK, text)


def redact(obj: Any, secrets: list[str] | None = None) -> Any:
    """A copy of a JSON-like structure with every string (keys included) redacted."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {redact(k, secrets): _field(k, v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v, secrets) for v in obj]
    return obj


def _field(key: Any, value: Any, secrets: list[str]) -> Any:
    """A dict's value; the whole of it when its key names a secret (``{"api_key": "..."}``)."""
    if isinstance(key, str) and isinstance(value, str) and len(value) >= 8 and _secret_name(key, value):
        return MARK
    return redact(value, secrets)


def redacted_task(
    data: dict[str, Any], source: str = "task", prose: tuple[str, ...] = ("description",)
) -> dict[str, Any]:
    """A task (JSON) with its secrets masked, as it is stored and handed to the run. Only prose may lose
    text: a secret in a field the run uses (a path, a name) is refused rather than quietly rewritten."""
    clean = redact(data)
    for key, value in data.items():
        where = _changed(value, clean.get(key), key) if key not in prose else None
        if where is not None:
            raise BadInput(
                f"{source}: {where}: holds what looks like a secret (a key or token); keep keys out "
                "of tasks (TRAINTEAM_MODEL_API_KEY or the keyring)"
            )
    return clean


def _changed(before: Any, after: Any, path: str) -> str | None:
    """The dotted path of the first value redaction changed, or None."""
    if isinstance(before, dict) and isinstance(after, dict):
        # strict=False: redaction keeps keys and lengths; a difference in them is reported below, not raised
        for (k, v), w in zip(before.items(), after.values(), strict=False):
            found = _changed(v, w, f"{path}.{k}")
            if found is not None:
                return found
        return None if list(before) == list(after) else path
    if isinstance(before, (list, tuple)) and isinstance(after, list):
        return next(
            (f for i, (v, w) in enumerate(zip(before, after, strict=False)) if (f := _changed(v, w, f"{path}[{i}]"))),
            None,
        )
    return None if before == after else path
