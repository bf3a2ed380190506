"""What the pages' scripts poll or stream: the runs table, a run's state and its curves (JSON and SSE)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, StreamingResponse

from trainteam.core.errors import BadInput, NotFound
from trainteam.core.ids import check_run_id
from trainteam.web.access import Session
from trainteam.web.curves import RunCurves
from trainteam.web.guard import console, person
from trainteam.web.run_page import RunRow, runs_list
from trainteam.workflows.engine.store import ApprovalStore, RunStore
from trainteam.workflows.report.views import run_view

router = APIRouter(prefix="/api")
FINAL = ("completed", "failed", "cancelled")
HEARTBEAT_S = 15.0


@router.get("/runs", response_model=list[RunRow])
def runs(request: Request, who: Session = Depends(person)):
    return runs_list(console(request).ws)


def _status(ws, run_id: str) -> dict | None:
    row = RunStore(ws.engine).get(run_id)
    return (
        None
        if row is None
        else {
            "run_id": run_id,
            "status": row["status"],
            "current_step": row["current_step"],
            "updated_at": row["updated_at"],
        }
    )


@router.get("/runs/{run_id}")
def run_state(request: Request, run_id: str, who: Session = Depends(person)):
    """The run's status as its page shows it (an active run whose process died reads ``interrupted``)."""
    ws = console(request).ws
    try:
        view = run_view(RunStore(ws.engine), ApprovalStore(ws.engine), run_id)
    except (BadInput, NotFound) as exc:
        return JSONResponse({"error": str(exc)}, status_code=404 if isinstance(exc, NotFound) else 400)
    return {
        "run_id": run_id,
        "status": view["status"],
        "current_step": view["current_step"],
        "updated_at": view["updated_at"],
        "live": bool(view["process_alive"]),
    }


@router.get("/runs/{run_id}/curves", response_model=RunCurves)
def curves(request: Request, run_id: str, who: Session = Depends(person)):
    try:
        return console(request).curves.read(run_id)
    except BadInput as exc:
        return JSONResponse({"error": str(exc)}, status_code=400)


@router.get("/runs/{run_id}/curves/stream")
async def curves_stream(request: Request, run_id: str, who: Session = Depends(person)):
    """Server-Sent Events: a ``curves`` event whenever the curves grew, ``end`` once the run is over."""
    c = console(request)
    try:
        check_run_id(run_id)
        if await run_in_threadpool(_status, c.ws, run_id) is None:
            raise NotFound(f"run {run_id!r} not found")
    except (BadInput, NotFound) as exc:
        return JSONResponse({"error": str(exc)}, status_code=404 if isinstance(exc, NotFound) else 400)
    return StreamingResponse(
        _events(request, c, run_id),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


async def _events(request: Request, c, run_id: str):
    """The first ``curves`` event holds every point so far, each later one only the new points (a
    series' ``offset`` says where they go): a long run's stream stays cheap to send and to read."""
    sent: dict[tuple[str, str], int] = {}
    total, quiet = -1, 0.0
    while not await request.is_disconnected():
        data: RunCurves = await run_in_threadpool(c.curves.read, run_id)
        state = await run_in_threadpool(_status, c.ws, run_id)
        if data.points != total:
            total, quiet = data.points, 0.0
            yield f"event: curves\ndata: {data.after(sent).model_dump_json()}\n\n"
        elif quiet >= HEARTBEAT_S:
            quiet = 0.0
            yield ": keep-alive\n\n"
        if state is None or state["status"] in FINAL:
            yield f"event: end\ndata: {state['status'] if state else 'gone'}\n\n"
            return
        await asyncio.sleep(c.poll_s)
        quiet += c.poll_s
