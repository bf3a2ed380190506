"""``models export`` for the CLI and the MCP tool: plan it (every check, nothing written), run it, record it.

The plan resolves the model in the registry, gathers its run's held-out rows and card facts
(``model_origin``), hashes its folder against the registered hash and checks the request
(``exporter.check_export_request``): an unknown model, a damaged folder, an architecture GGUF cannot hold or
an ``--out`` that exists or cannot be written ends there with one line. Running it writes and reads back the
export (``exporter.export_model``), then records an Export node that ``exports`` the Model node in the graph
(where, format, hash, the check's figures), which ``models show`` lists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel

from trainteam.agents.bound_models import record_registered_model
from trainteam.core.db import utcnow
from trainteam.graph.record import record_export, recorded_exports
from trainteam.trainers.export.exporter import (
    ExportRequest,
    ExportResult,
    ExportSource,
    Progress,
    check_export_request,
    export_model,
)
from trainteam.trainers.serving.registry import ModelRecord, ModelRegistry, checkpoint_hash
from trainteam.workflows.report.model_origin import export_source


class ExportPlan(BaseModel):
    """What an export will do, shown before it runs (the MCP tool's plan, the CLI's first lines)."""

    model_id: str
    name: str
    folder: str
    format: str
    quant: str | None
    out: str
    rows: int
    rows_source: str


class PlannedExport(BaseModel):
    """A checked export, ready to run."""

    model_config = {"arbitrary_types_allowed": True}

    record: ModelRecord
    source: ExportSource
    request: ExportRequest
    hashed: str
    plan: ExportPlan


def plan_export(ws: Any, model: str, request: ExportRequest, rows_file: Path | None = None) -> PlannedExport:
    """Every check of an export, nothing written; BadInput (one line, the fix) when it cannot work."""
    record = ModelRegistry.of(ws).get(model)
    source = export_source(ws, record, rows_file)
    hashed = checkpoint_hash(source.folder)
    out = check_export_request(source, request, hashed=hashed)
    plan = ExportPlan(
        model_id=record.id,
        name=record.name,
        folder=str(source.folder),
        format=request.format,
        quant=None if request.format == "hf" else request.quant,
        out=str(out),
        rows=len(source.rows.rows),
        rows_source=source.rows.source,
    )
    return PlannedExport(record=record, source=source, request=request, hashed=hashed, plan=plan)


def run_export(ws: Any, planned: PlannedExport, progress: Progress) -> ExportResult:
    """Write, read back and record the export ``planned``."""
    result = export_model(planned.source, planned.request, progress, hashed=planned.hashed)
    rec = planned.record
    record_registered_model(ws.graph, rec)
    check = result.check
    record_export(
        ws.graph,
        rec.id,
        f"{rec.id}/{result.format}/{result.sha256[:16]}",
        format=result.format,
        quant=result.quant,
        path=str(result.out / result.artifact),
        folder=str(result.out),
        sha256=result.sha256,
        at=utcnow(),
        seconds=result.seconds,
        check=check.line(),
        metric=check.answers.metric,
        registered=check.answers.registered,
        exported=check.answers.exported,
        rows=check.answers.rows,
        stops=check.answers.stops_exported,
    )
    return result


def exports_of(ws: Any, model_id: str) -> list[dict[str, Any]]:
    """The recorded exports of a model, oldest first: format, quant, where, hash, the check."""
    keep = ("format", "quant", "folder", "path", "sha256", "at", "check")
    return [{k: n.get(k) for k in keep} for n in recorded_exports(ws.graph, model_id)]
