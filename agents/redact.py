"""Secret redaction for everything an agent run leaves behind (transcripts, graph, pending approvals).

Two nets: the values of secret-named environment variables (``*_KEY``, ``*_TOKEN``,
``*_SECRET``, ``*PASSWORD*``) wherever they appear, and key-shaped strings
(``sk-…``, ``ghp_…``, ``hf_…``, ``AKIA…``, bearer tokens) even when they came from a
data record rather than the environment.
"""

from __future__ import annotations

import os
import re
from typing import Any

MARK = "[REDACTED]"
_SECRET_NAME = re.compile(r"(_KEY|_TOKEN|_SECRET|PASSWORD|PASSWD|_PAT)$|API_KEY|SECRET", re.IGNORECASE)
_PATTERNS = re.compile(
    r"sk-(?:ant-|proj-)?[A-Za-z0-9_\-]{12,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|hf_[A-Za-z0-9]{20,}"
    r"|xox[abprs]-[A-Za-z0-9\-]{10,}"
    r"|AKIA[0-9A-Z]{16}"
    r"|AIza[0-9A-Za-z_\-]{30,}"
    r"|(?i:bearer)\s+[A-Za-z0-9._\-]{16,}"
)
_MIN_SECRET_LEN = 6  # shorter values ("1", "true") would redact ordinary text


def secret_values(environ: dict[str, str] | None = None) -> list[str]:
    env = os.environ if environ is None else environ
    values = {v for k, v in env.items() if _SECRET_NAME.search(k) and v and len(v) >= _MIN_SECRET_LEN}
    return sorted(values, key=len, reverse=True)  # longest first: a key containing another is fully masked


def redact_text(text: str, secrets: list[str] | None = None) -> str:
    for value in secret_values() if secrets is None else secrets:
        if value in text:
            text = text.replace(value, MARK)
    return _PATTERNS.sub(MARK, text)


def redact(obj: Any, secrets: list[str] | None = None) -> Any:
    """A copy of a JSON-like structure with every string (keys included) redacted."""
    secrets = secret_values() if secrets is None else secrets
    if isinstance(obj, str):
        return redact_text(obj, secrets)
    if isinstance(obj, dict):
        return {redact(k, secrets): redact(v, secrets) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact(v, secrets) for v in obj]
    return obj
