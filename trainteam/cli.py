"""The `trainteam` command. Built from the command modules in trainteam.commands.

Every short command (list, show, approve, ...) stays light: no torch, no dbos
launch. Errors a person can fix print one line and exit 2; a failed run exits 1.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Optional

import click
import typer

from trainteam.commands import COMMAND_MODULES
from trainteam.errors import TrainteamError

app = typer.Typer(
    name="trainteam",
    help="LLM training run by a team of AI agents under human oversight.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    workspace: Optional[Path] = typer.Option(
        None, "--workspace", "-w", envvar="TRAINTEAM_HOME", help="workspace folder (default ./.trainteam)"
    ),
) -> None:
    from trainteam.commands import common

    common.STATE.workspace = workspace


for _name in COMMAND_MODULES:
    importlib.import_module(f"trainteam.commands.{_name}").register(app)


def main(argv: list[str] | None = None) -> None:
    from trainteam.commands.common import err

    try:
        code = app(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        err("aborted")
        sys.exit(130)
    except click.ClickException as exc:
        err(exc.format_message())
        sys.exit(2)
    except TrainteamError as exc:
        err(str(exc))
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
