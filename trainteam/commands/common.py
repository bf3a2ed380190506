"""Helpers shared by the command modules: the workspace (and its read-only stores), JSON and one-line errors."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainteam.contract.redaction import redact, redact_text
from trainteam.core.dbread import connect_readonly
from trainteam.core.errors import BadInput, format_validation_error
from trainteam.workflows.engine import readonly

if TYPE_CHECKING:
    from trainteam.workflows.engine.store import ApprovalStore, RunStore


class _LazyConsole:
    """A rich Console made on first use: ``--json`` output never needs rich (~30 ms to import)."""

    def __init__(self, **options: Any):
        self._options = options
        self._console: Any = None

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
    from trainteam.workspace import Workspace  # SQLAlchemy, pydantic-settings: not for --help or `runs list`

    return Workspace.open(STATE.workspace)


def read_stores() -> tuple[readonly.RunReader | RunStore, readonly.ApprovalReader | ApprovalStore]:
    """(runs, approvals) stores for the list/show commands, which only read.

    On the workspace's own SQLite database: the stdlib read-only twins (no SQLAlchemy, no
    pydantic-settings: a cold start stays short). Otherwise (Postgres or another configured
    URL, a workspace not created yet): ``RunStore``/``ApprovalStore`` on ``Workspace.open``.
    """
    conn = connect_readonly(STATE.workspace, readonly.TABLES)
    if conn is not None:
        return readonly.RunReader(conn), readonly.ApprovalReader(conn)
    from trainteam.workflows.engine.store import ApprovalStore, RunStore  # SQLAlchemy: only off the stdlib path

    engine = workspace().engine
    return RunStore(engine), ApprovalStore(engine)


def err(message: str) -> None:
    """The one-line error: masked (a library's message may echo a key) and printed as text, not markup."""
    from rich.markup import escape

    err_console.print(
        f"[red]error:[/red] {escape(redact_text(str(message)))}", highlight=False, markup=True, soft_wrap=True
    )


def print_json(data: Any) -> None:
    """JSON on stdout, masked like everything stored (what an older version stored unmasked stays hidden)."""
    sys.stdout.write(json.dumps(redact(json.loads(json.dumps(data, default=str))), indent=2) + "\n")


def load_config_file(path: Path, cls, option: str):
    """A pydantic config from a YAML/JSON file given on the command line; one-line errors
    name the option, the file and the field."""
    from pydantic import ValidationError

    from trainteam.core.inputfiles import load_yaml, read_text  # PyYAML: only commands that read a file

    # bounded: a regular UTF-8 file of at most 1 MiB, YAML with depth/alias/size limits
    data = load_yaml(read_text(path, f"{option} file"), f"{option}: {path}") or {}
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise BadInput(format_validation_error(exc, str(path))) from None


def check_out_file(path: Path, option: str) -> None:
    """An output file a person named: its folder exists, and it is not a folder or a device."""
    if path.exists() and not path.is_file():
        raise BadInput(f"{option}: {path} exists and is not a regular file")
    if not path.parent.is_dir():
        raise BadInput(f"{option}: the folder {path.parent} does not exist")


def check_out_folder(path: Path, option: str) -> None:
    """An output folder a person named: a folder, or a new one inside an existing folder."""
    if path.exists() and not path.is_dir():
        raise BadInput(f"{option}: {path} exists and is not a folder")
    if not path.exists() and not path.parent.is_dir():
        raise BadInput(f"{option}: the folder {path.parent} does not exist")
