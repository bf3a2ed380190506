"""Probe for test_walk.py: run the real `trainteam execute-workflow` in this process and record
which project files lie on the walk from the command line to the line that builds ``SFTTrainer(``.

Usage: python _walk_probe.py TASK_YAML  (TRAINTEAM_HOME set by the caller).

Three call stacks are recorded, because the walk crosses two thread hops:
  cli    when the command starts the workflow (``DBOS.start_workflow``: cli -> command -> runner -> engine),
  agent  when the workflow thread hands the step to its persona (``pydantic_ai.Agent.run_sync``:
         engine -> persona runtime),
  sft    when the persona's tool thread constructs ``trl.SFTTrainer`` (step -> trainer -> method).
At the first ``SFTTrainer.__init__`` it prints one JSON line ``WALK {...}`` and leaves with
``os._exit(0)`` (the rest of the run does not matter)."""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

# The folders installed as trainteam.* (pyproject package-dir), wherever this interpreter imports them from;
# the longest folder first, so a subpackage folder wins over one that holds it.
FOLDERS = ("trainteam", "agents", "workflows", "curation", "trainers", "graph", "prompts", "skills")
stacks: dict[str, list[str]] = {}


def _project_dirs() -> list[tuple[str, str]]:
    import importlib

    dirs = []
    for folder in FOLDERS:
        package = importlib.import_module("trainteam" if folder == "trainteam" else f"trainteam.{folder}")
        dirs.append((str(Path(package.__file__).parent) + os.sep, folder))
    return sorted(dirs, key=lambda d: -len(d[0]))


PROJECT = _project_dirs()


def project_path(filename: str) -> str | None:
    """'agents/runtime.py' for a frame in the project, None for any other file."""
    for prefix, folder in PROJECT:
        if filename.startswith(prefix):
            return f"{folder}/{filename[len(prefix):]}"
    return None


def capture(tag: str) -> None:
    """The project frames of the current thread's stack, outermost first, as 'path:line:function'."""
    stacks[tag] = [f"{path}:{fr.lineno}:{fr.name}" for fr in traceback.extract_stack()
                   if (path := project_path(fr.filename)) is not None]


def report() -> None:
    files: list[str] = []
    for tag in ("cli", "agent", "sft"):
        for entry in stacks.get(tag, []):
            path = entry.split(":", 1)[0]
            if path not in files:
                files.append(path)
    print("WALK " + json.dumps({"files": files, "stacks": stacks}), flush=True)


def patch() -> None:
    import dbos
    import pydantic_ai
    import trl

    start_workflow = dbos.DBOS.start_workflow

    def started(*args, **kwargs):
        capture("cli")
        return start_workflow(*args, **kwargs)

    dbos.DBOS.start_workflow = staticmethod(started)

    run_sync = pydantic_ai.Agent.run_sync

    def ran(self, *args, **kwargs):
        capture("agent")  # the latest persona run is the one whose tool builds the trainer
        return run_sync(self, *args, **kwargs)

    pydantic_ai.Agent.run_sync = ran

    def built(self, *args, **kwargs):
        capture("sft")
        report()
        os._exit(0)

    trl.SFTTrainer.__init__ = built


def main() -> None:
    patch()
    sys.argv = ["trainteam", "execute-workflow", "train_model", "--task", sys.argv[1], "-q"]
    from trainteam.cli import main as cli_main

    try:
        cli_main()
    except SystemExit as exc:
        print(f"the run ended (exit {exc.code}) before SFTTrainer was built", file=sys.stderr)
    report()
    sys.exit(3)


if __name__ == "__main__":
    main()
