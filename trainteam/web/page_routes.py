"""The console's pages: runs, a run, its transcripts and plots, approvals (and deciding one), lineage."""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import FileResponse, RedirectResponse

from trainteam.core.errors import BadInput, Conflict, NotFound
from trainteam.core.ids import check_run_id
from trainteam.graph.knowledge import UnknownNode
from trainteam.web import run_page as views
from trainteam.web.access import Session
from trainteam.web.approval_cards import all_cards, one_card
from trainteam.web.guard import checked_form, console, person
from trainteam.web.lineage_picture import picture
from trainteam.workflows.engine.approvals import decide

router = APIRouter()


def _page(request: Request, name: str, who: Session, status_code: int = 200, **context):
    return request.app.state.templates.TemplateResponse(
        request, name, {"who": who, "csrf": who.csrf, **context}, status_code=status_code
    )


def _missing(request: Request, who: Session, message: str, status_code: int = 404):
    return _page(
        request,
        "message.html",
        who,
        status_code,
        title="Not found" if status_code == 404 else "Refused",
        message=message,
    )


@router.get("/")
def home():
    return RedirectResponse("/runs", status_code=303)


@router.get("/runs")
def runs(request: Request, who: Session = Depends(person)):
    return _page(request, "runs.html", who, runs=views.runs_list(console(request).ws))


@router.get("/runs/{run_id}")
def run(request: Request, run_id: str, who: Session = Depends(person)):
    try:
        c = console(request)
        page = c.run_pages.get(run_id, lambda: views.run_page(c.ws, run_id))
    except (NotFound, BadInput) as exc:
        return _missing(request, who, str(exc))
    return _page(request, "run.html", who, page=page)


@router.get("/runs/{run_id}/transcripts")
def transcripts(request: Request, run_id: str, who: Session = Depends(person)):
    try:
        check_run_id(run_id)
    except BadInput as exc:
        return _missing(request, who, str(exc))
    return _page(
        request, "transcripts.html", who, run_id=run_id, transcripts=views.transcripts(console(request).ws, run_id)
    )


@router.get("/runs/{run_id}/plots/{name}")
def plot(request: Request, run_id: str, name: str, who: Session = Depends(person)):
    ws = console(request).ws
    try:
        check_run_id(run_id)
    except BadInput as exc:
        return _missing(request, who, str(exc))
    if name not in views.plots(ws, run_id):
        return _missing(request, who, f"no plot {name!r} in the report of run {run_id}")
    return FileResponse(ws.dir("reports") / run_id / name, media_type="image/png")


def _approvals_page(
    request: Request, who: Session, status_code: int = 200, error: str | None = None, decided: str | None = None
):
    pending, done = all_cards(console(request).ws)
    return _page(
        request,
        "approvals.html",
        who,
        status_code,
        pending=pending,
        done=done,
        error=error,
        decided=_decided(request, decided),
    )


def _decided(request: Request, ref: str | None):
    """The approval a redirect after a decision names (``?decided=``), or None."""
    if not ref:
        return None
    try:
        return one_card(console(request).ws, ref).view
    except (BadInput, NotFound):
        return None


@router.get("/approvals")
def approvals(request: Request, decided: str | None = None, who: Session = Depends(person)):
    return _approvals_page(request, who, decided=decided)


@router.get("/approvals/{ref}")
def approval(request: Request, ref: str, who: Session = Depends(person)):
    """One approval by its short id (or a unique prefix of it, or its id)."""
    try:
        found = one_card(console(request).ws, ref)
    except NotFound as exc:
        return _missing(request, who, str(exc))
    except BadInput as exc:
        return _missing(request, who, str(exc), 400)
    return _page(request, "approval.html", who, card=found)


@router.post("/approvals/{ref}/decide")
def decide_approval(
    request: Request, ref: str, decision: str = Form(""), note: str = Form(""), who: Session = Depends(checked_form)
):
    """A person's decision, through the same function as ``trainteam approvals approve|reject``;
    ``ref`` is what ``approvals approve`` takes (the short id the page links to, or the id)."""
    if decision not in ("approve", "reject"):
        return _approvals_page(request, who, 400, error="decision: approve or reject")
    try:
        row = decide(console(request).ws, ref, approve=decision == "approve", by=who.name, note=note.strip() or None)
    except Conflict as exc:
        return _approvals_page(request, who, 409, error=str(exc))
    except (BadInput, NotFound) as exc:
        return _approvals_page(request, who, 404 if isinstance(exc, NotFound) else 400, error=str(exc))
    finally:
        console(request).run_pages.clear()  # the person who decided sees it on the run's page at once
    return RedirectResponse(f"/approvals?decided={row['short_id']}", status_code=303)


@router.get("/graph")
def graph(request: Request, node: str = "", who: Session = Depends(person)):
    g = console(request).ws.graph
    try:
        nid = g.resolve(node)
        sub = g.lineage(nid)
    except (UnknownNode, BadInput) as exc:
        return _missing(request, who, str(exc.args[0]) if exc.args else "unknown node")
    attrs = {k: v for k, v in g.get_node(nid).items() if k not in ("id",)}
    svg = picture(sub, nid, href=lambda n: "/graph?" + urlencode({"node": n}))
    return _page(request, "graph.html", who, node=nid, attrs=attrs, svg=svg, count=sub.number_of_nodes())
