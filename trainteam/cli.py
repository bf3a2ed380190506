"""The `trainteam` command. Built from the command modules in trainteam.commands.

Every short command (list, show, approve, ...) stays light: no torch, no dbos
launch, and only the invoked command's module is imported (``LazyGroup``; the
top-level help lines come from ``trainteam.commands.COMMANDS``). Errors a person
can fix print one line and exit 2; a failed run exits 1.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path

import typer
from typer.core import TyperCommand, TyperGroup

from trainteam.commands import COMMANDS
from trainteam.commands.common import STATE, err
from trainteam.core.dbread import diagnose, workspace_databases
from trainteam.core.errors import TrainteamError


def load_commands(module: str) -> dict:
    """The click commands one command module registers, converted as ``add_typer`` would."""
    sub = typer.Typer(pretty_exceptions_enable=False, add_completion=False)
    importlib.import_module(f"trainteam.commands.{module}").register(sub)
    return dict(typer.main.get_group(sub).commands)


class _Commands(MutableMapping):
    """The root group's commands: every name in COMMANDS, its module imported on first lookup."""

    def __init__(self, loaded: Mapping):
        self.loaded = dict(loaded)

    def __getitem__(self, name: str):
        if name not in self.loaded and name in COMMANDS:
            self.loaded.update(load_commands(COMMANDS[name][0]))
        return self.loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(list(COMMANDS) + [n for n in self.loaded if n not in COMMANDS])

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self.loaded))

    def __setitem__(self, name: str, command) -> None:
        self.loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self.loaded[name]


class LazyGroup(TyperGroup):
    """A typer group that imports a command's module only when the command runs. Its own
    ``--help`` lists every command from the stored help lines, importing none of them."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._lazy = _Commands(self.commands)
        self.commands = self._lazy
        self._describing = False

    def list_commands(self, ctx) -> list[str]:
        return list(self.commands)

    def get_command(self, ctx, cmd_name: str):
        if self._describing and cmd_name in COMMANDS and cmd_name not in self._lazy.loaded:
            return TyperCommand(cmd_name, help=COMMANDS[cmd_name][1])
        return self.commands.get(cmd_name)

    def format_help(self, ctx, formatter) -> None:
        self._describing = True
        try:
            return super().format_help(ctx, formatter)
        finally:
            self._describing = False


app = typer.Typer(
    name="trainteam",
    cls=LazyGroup,
    help="LLM training run by a team of AI agents under human oversight.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)


@app.callback()
def _root(
    workspace: Path | None = typer.Option(
        None, "--workspace", "-w", envvar="TRAINTEAM_HOME", help="workspace folder (default ./.trainteam)"
    ),
) -> None:
    STATE.workspace = workspace


def main(argv: list[str] | None = None) -> None:
    try:
        code = app(args=argv, standalone_mode=False)
    except typer.Abort:
        err("aborted")
        sys.exit(130)
    except typer.TyperException as exc:  # typer's own click: usage errors, bad parameters
        if exc.format_message().strip():  # empty when a group's help was printed instead (no arguments)
            err(exc.format_message())
        sys.exit(2)
    except TrainteamError as exc:
        err(str(exc))
        sys.exit(exc.exit_code)
    except Exception as exc:
        found = _damaged_database(exc)
        if found is None:
            raise
        err(found)
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


def _damaged_database(exc: BaseException) -> str | None:
    """One line naming the damaged workspace database when ``exc`` (or what caused it) is a
    database error and ``PRAGMA quick_check`` finds one of the workspace's SQLite files damaged;
    None for any other error (a locked database, a bug), which keeps its traceback."""
    import sqlite3

    sa_exc = sys.modules.get("sqlalchemy.exc")  # imported only by commands that used SQLAlchemy
    kinds = (sqlite3.DatabaseError,) + ((sa_exc.DatabaseError,) if sa_exc else ())
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen and not isinstance(cur, kinds):
        seen.add(id(cur))
        cur = cur.__cause__ or cur.__context__
    if cur is None or id(cur) in seen:
        return None
    return diagnose(workspace_databases(STATE.workspace))


if __name__ == "__main__":
    main()
