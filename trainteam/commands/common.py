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
