"""Helpers shared by the command modules: the workspace (and its read-only stores), JSON and one-line errors."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class _LazyConsole:
    """A rich Console made on first use: ``--json`` output never needs rich (~30 ms to import)."""

    def __init__(self, **options: Any):
        self._options = options
        self._console = None

    def __getattr__(self, name: str):
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return getattr(self._console, name)


console = _LazyConsole(soft_wrap=True)
err_console = _LazyConsole(stderr=True, soft_wrap=True)


@dataclass
class _State:
    workspace: Path | None = None


STATE = _State()


def workspace():
    from trainteam.workspace import Workspace

    return Workspace.open(STATE.workspace)


def read_stores():
    """(runs, approvals) stores for the list/show commands, which only read.

    On the workspace's own SQLite database: the stdlib read-only twins (no SQLAlchemy, no
    pydantic-settings: a cold start stays short). Otherwise (Postgres or another configured
    URL, a workspace not created yet): ``RunStore``/``ApprovalStore`` on ``Workspace.open``.
    """
    from trainteam.dbread import connect_readonly
    from trainteam.workflows import readonly

    conn = connect_readonly(STATE.workspace, readonly.TABLES)
    if conn is not None:
        return readonly.RunReader(conn), readonly.ApprovalReader(conn)
    from trainteam.workflows.store import ApprovalStore, RunStore

    engine = workspace().engine
    return RunStore(engine), ApprovalStore(engine)


def err(message: str) -> None:
    err_console.print(f"[red]error:[/red] {message}", highlight=False, markup=True, soft_wrap=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def load_config_file(path: Path, cls, option: str):
    """A pydantic config from a YAML/JSON file given on the command line; one-line errors
    name the option, the file and the field."""
    import yaml
    from pydantic import ValidationError

    from trainteam.errors import BadInput, format_validation_error

    if not path.is_file():
        raise BadInput(f"{option}: {path}: no such file")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise BadInput(f"{option}: {path}: not YAML/JSON ({exc.__class__.__name__})") from None
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, str(path))) from None
