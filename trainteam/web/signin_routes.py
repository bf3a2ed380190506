"""Signing in (the access token and the person's name) and out."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, Form, Request
from fastapi.responses import RedirectResponse

from trainteam.core.errors import BadInput
from trainteam.web.access import SESSION_COOKIE, SESSION_S, SIGNIN_COOKIE, check_name, csrf_ok, token_matches
from trainteam.web.guard import checked_form, console

router = APIRouter()


def _next(path: str | None) -> str:
    """Where to go after signing in: a path on this console only."""
    return path if path and path.startswith("/") and not path.startswith("//") and "\\" not in path else "/runs"


def signin_page(
    request: Request, status_code: int = 200, error: str | None = None, name: str = "", next_path: str | None = None
):
    """The sign-in form, with a fresh CSRF token in a hidden field and in a short-lived cookie."""
    token = secrets.token_urlsafe(24)
    here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
    target = _next(next_path or (here if request.method == "GET" else None))
    response = request.app.state.templates.TemplateResponse(
        request,
        "signin.html",
        {"csrf": token, "error": error, "name": name, "next": target, "who": None},
        status_code=status_code,
    )
    response.set_cookie(SIGNIN_COOKIE, token, max_age=900, httponly=True, samesite="strict", path="/signin")
    return response


@router.get("/signin")
def signin_form(request: Request, next: str = "/runs"):
    return signin_page(request, next_path=next)


@router.post("/signin")
def signin(
    request: Request, token: str = Form(""), name: str = Form(""), csrf: str = Form(""), next: str = Form("/runs")
):
    if not csrf_ok(request.cookies.get(SIGNIN_COOKIE), csrf):
        return signin_page(request, 403, "The sign-in form expired or came from elsewhere; try again.", name, next)
    if not token_matches(console(request).ws.root, token.strip()):
        return signin_page(request, 401, "Wrong access token.", name, next)
    try:
        person = check_name(name)
    except BadInput as exc:
        return signin_page(request, 400, str(exc), name, next)
    sid, _ = console(request).sessions.open(person)
    response = RedirectResponse(_next(next), status_code=303)
    response.set_cookie(SESSION_COOKIE, sid, max_age=SESSION_S, httponly=True, samesite="strict", path="/")
    response.delete_cookie(SIGNIN_COOKIE, path="/signin")
    return response


@router.post("/signout")
def signout(request: Request, csrf: str = Form("")):
    checked_form(request, csrf)
    console(request).sessions.close(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse("/signin", status_code=303)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response
