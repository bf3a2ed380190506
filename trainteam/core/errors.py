"""Errors a person can act on. Each maps to an exit code of the CLI."""

from __future__ import annotations


class TrainteamError(Exception):
    """A failure the user should see as one line, no traceback."""

    exit_code = 1


class BadInput(TrainteamError):
    """Malformed task, spec or argument: the message names the field or file."""

    exit_code = 2


class NotFound(BadInput):
    pass


class Conflict(TrainteamError):
    """The request contradicts what is stored (e.g. deciding an approval twice)."""

    exit_code = 2


def format_validation_error(exc, source: str) -> str:
    """One line from a pydantic ValidationError: `source: field.path: message`."""
    parts = []
    for err in exc.errors()[:3]:
        loc = ".".join(str(x) for x in err.get("loc", ()))
        msg = str(err.get("msg", "")).removeprefix("Value error, ")
        if err.get("type") == "missing":
            msg = "required field is missing"
        elif err.get("type") == "extra_forbidden":
            msg = "unknown field"
        parts.append(f"{loc}: {msg}" if loc else msg)
    more = f" (+{exc.error_count() - 3} more)" if exc.error_count() > 3 else ""
    return f"{source}: " + "; ".join(parts) + more


class RunStopped(TrainteamError):
    """A run ended without completing (failed, rejected, over budget): raised out of its DBOS
    workflow so the engine records ERROR, which DBOS's own CLI, ``list_workflows(status=…)``
    and ``fork_workflow`` read. ``result`` is what a completed run would have returned."""

    def __init__(self, result: dict):
        super().__init__(f"run {result.get('run_id')} {result.get('status')}: {result.get('error')}")
        self.result = result

    def __reduce__(self):  # DBOS pickles the workflow's exception
        return (RunStopped, (self.result,))
