"""Helpers shared by the command modules: the workspace, JSON and one-line errors."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console

console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


@dataclass
class _State:
    workspace: Path | None = None


STATE = _State()


def workspace():
    from trainteam.workspace import Workspace

    return Workspace.open(STATE.workspace)


def err(message: str) -> None:
    err_console.print(f"[red]error:[/red] {message}", highlight=False, markup=True, soft_wrap=True)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
