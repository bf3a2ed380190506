"""Who may use the console: the access token (its hash in the workspace), sessions and CSRF tokens.

``trainteam web --new-token`` makes a token, prints it once and stores only its SHA-256 in
``<workspace>/web-access.json`` (a new token replaces the old one). A 32-byte random token needs no
slow hash: nobody can guess its preimage. Signing in with it opens a session held in this server's
memory (a restart signs everyone out); the session cookie is an opaque random id, and each session
has its own CSRF token that every form posts back.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from trainteam.core.db import utcnow
from trainteam.core.errors import BadInput

ACCESS_FILE = "web-access.json"
SESSION_COOKIE = "trainteam_session"
SIGNIN_COOKIE = "trainteam_signin"  # the sign-in form's CSRF token, before any session exists
SESSION_S = 12 * 3600


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(root: Path) -> str:
    """A fresh access token; its hash replaces the stored one (written atomically, mode 0600)."""
    token = "ttw_" + secrets.token_urlsafe(32)
    path = Path(root) / ACCESS_FILE
    tmp = path.with_name(f".{ACCESS_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump({"token_sha256": _digest(token), "created_at": utcnow()}, fh)
    os.replace(tmp, path)
    return token


def stored_digest(root: Path) -> str | None:
    path = Path(root) / ACCESS_FILE
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text()).get("token_sha256")
    except (ValueError, AttributeError):
        raise BadInput(f"{path}: not a trainteam web access file; run `trainteam web --new-token`") from None
    return value if isinstance(value, str) else None


def token_matches(root: Path, token: str) -> bool:
    digest = stored_digest(root)
    return digest is not None and hmac.compare_digest(digest, _digest(token))


@dataclass
class Session:
    name: str
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(24))
    started: float = field(default_factory=time.time)


class Sessions:
    """Signed-in people of this server, by opaque session id."""

    def __init__(self, max_age_s: float = SESSION_S):
        self.max_age_s = max_age_s
        self._by_id: dict[str, Session] = {}
        self._lock = threading.Lock()

    def open(self, name: str) -> tuple[str, Session]:
        sid, session = secrets.token_urlsafe(32), Session(name=name)
        with self._lock:
            self._by_id[sid] = session
        return sid, session

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        with self._lock:
            session = self._by_id.get(sid)
            if session is not None and time.time() - session.started > self.max_age_s:
                del self._by_id[sid]
                return None
            return session

    def close(self, sid: str | None) -> None:
        with self._lock:
            self._by_id.pop(sid or "", None)


def csrf_ok(expected: str | None, given: str | None) -> bool:
    return bool(expected and given and hmac.compare_digest(expected, given))


def check_name(name: str) -> str:
    """A person's name as the approval queue records it (``approvals._decider`` checks it again)."""
    name = name.strip()
    if not name or len(name) > 128 or any(ord(ch) < 32 for ch in name):
        raise BadInput("name: a person's name, 1 to 128 printable characters")
    return name
