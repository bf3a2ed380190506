"""The console's gate: every page needs a signed-in person, every form post its session's CSRF token."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Form, Request

from trainteam.web.access import SESSION_COOKIE, Session, Sessions, csrf_ok
from trainteam.web.curves import CurveReader
from trainteam.web.page_cache import ShortLived
from trainteam.workspace import Workspace


class SignInRequired(Exception):
    """No valid session: the app answers with the sign-in page (401), or a JSON 401 under /api."""


class CsrfRefused(Exception):
    """A form post without its session's CSRF token (403)."""


@dataclass
class Console:
    """What the routes share, held in ``app.state.console``."""

    ws: Workspace
    sessions: Sessions
    curves: CurveReader
    poll_s: float = 1.0
    run_pages: ShortLived = field(default_factory=ShortLived)  # run page data, shared by its viewers


def console(request: Request) -> Console:
    return request.app.state.console


def person(request: Request) -> Session:
    session = console(request).sessions.get(request.cookies.get(SESSION_COOKIE))
    if session is None:
        raise SignInRequired()
    return session


def checked_form(request: Request, csrf: str = Form("")) -> Session:
    """The signed-in person of a form post whose hidden ``csrf`` field matches their session's token."""
    session = person(request)
    if not csrf_ok(session.csrf, csrf):
        raise CsrfRefused()
    return session
