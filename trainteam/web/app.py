"""The console's FastAPI app (``create_app``) and its server (``serve``: uvicorn on 127.0.0.1 by default)."""

from __future__ import annotations

import socket
from pathlib import Path

import jinja2
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.middleware.trustedhost import TrustedHostMiddleware

from trainteam.core.listening import bound_socket
from trainteam.web import live_routes, page_routes, signin_routes
from trainteam.web.access import Sessions
from trainteam.web.curves import CurveReader
from trainteam.web.guard import Console, CsrfRefused, SignInRequired
from trainteam.web.sparkline import is_curve, marked_curve, sparkline
from trainteam.workflows.engine.approval_ids import short_id

HERE = Path(__file__).parent
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
    "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
}


def templates() -> Jinja2Templates:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True)
    env.tests["curve"] = is_curve
    env.filters["sparkline"] = sparkline
    env.filters["spike_picture"] = lambda curve, step: marked_curve([(p.step, p.loss) for p in curve], step)
    env.filters["short_id"] = short_id
    env.tests["mapping"] = lambda v: isinstance(v, dict)
    env.tests["listing"] = lambda v: isinstance(v, list)
    env.tests["table"] = _table
    env.tests["nested"] = lambda v: isinstance(v, list) and any(isinstance(i, (dict, list)) for i in v)
    return Jinja2Templates(env=env)


def _table(value) -> bool:
    """A list of two or more mappings with the same keys, whose values are not nested."""
    return (
        isinstance(value, list)
        and len(value) >= 2
        and all(isinstance(r, dict) for r in value)
        and len({tuple(r) for r in value}) == 1
        and not any(isinstance(v, (dict, list)) for r in value for v in r.values())
    )


def create_app(ws, hosts: list[str] | None = None, poll_s: float = 1.0) -> FastAPI:
    """The app over workspace ``ws``; ``hosts`` are the Host headers it answers (DNS rebinding)."""
    app = FastAPI(title="trainteam console", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.console = Console(ws=ws, sessions=Sessions(), curves=CurveReader(ws.dir("checkpoints")), poll_s=poll_s)
    app.state.templates = templates()
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=hosts or ["127.0.0.1", "localhost", "testserver"])

    @app.middleware("http")
    async def _headers(request: Request, call_next):
        response = await call_next(request)
        for key, value in HEADERS.items():
            response.headers.setdefault(key, value)
        return response

    @app.exception_handler(SignInRequired)
    async def _sign_in(request: Request, exc: SignInRequired):
        if request.url.path.startswith("/api/"):
            return JSONResponse({"error": "sign in first"}, status_code=401)
        return signin_routes.signin_page(request, status_code=401)

    @app.exception_handler(CsrfRefused)
    async def _csrf(request: Request, exc: CsrfRefused):
        return app.state.templates.TemplateResponse(
            request,
            "message.html",
            {
                "title": "Refused",
                "message": "The form's CSRF token is missing or wrong; reload the page and try again.",
                "who": None,
            },
            status_code=403,
        )

    app.mount("/static", StaticFiles(directory=HERE / "static"), name="static")
    app.include_router(signin_routes.router)
    app.include_router(page_routes.router)
    app.include_router(live_routes.router)
    return app


def serve(ws, host: str = "127.0.0.1", port: int = 8765, announce=print) -> None:
    """Run the console until interrupted. The socket is bound first, so ``--port 0`` (any free port)
    announces the port it got."""
    loopback = host in ("127.0.0.1", "localhost", "::1")
    hosts = sorted({host, "127.0.0.1", "localhost"}) if loopback else ["*"]
    sock = bound_socket(host, port)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if sock.family == socket.AF_INET6 else host
    announce(f"trainteam console at http://{shown}:{bound}/ (sign in with a token from `trainteam web --new-token`)")
    config = uvicorn.Config(create_app(ws, hosts), log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])
