"""Probe for test_walk.py: run the real `trainteam execute-workflow` in this process and record
which project files lie on the walk from the command line to the line that builds ``SFTTrainer(``,
and where the task's value changes shape on the way.

Usage: python _walk_probe.py TASK_YAML  (TRAINTEAM_HOME set by the caller).

Three call stacks are recorded, because the walk crosses two thread hops:
  cli    when the command starts the workflow (``DBOS.start_workflow``: cli -> command -> runner -> engine),
  agent  when the workflow thread hands the step to its persona (``pydantic_ai.Agent.run_sync``:
         engine -> persona runtime),
  sft    when the persona's tool thread constructs ``trl.SFTTrainer`` (step -> trainer -> method).
Following the task value, one stack more at each moment the SFT stage's config changes shape (``VALUE_MOMENTS``):
each hooks, by name, the first candidate found in the project's source, so a function that is renamed or
added (the stage resolver ``resolve_stage``) is followed without editing this file. Each such stack ends
with the hooked function's own frame. Only the moments of the thread that builds the SFTTrainer count, the
latest of each since that thread last built another trainer (the pretrain stage's calls are not the SFT's).
At the first ``SFTTrainer.__init__`` it prints one JSON line ``WALK {...}`` and leaves with
``os._exit(0)`` (the rest of the run does not matter)."""

from __future__ import annotations

import ast
import functools
import importlib
import json
import os
import sys
import threading
import traceback
from pathlib import Path

# The folders installed as trainteam.* (pyproject package-dir), wherever this interpreter imports them from;
# the longest folder first, so a subpackage folder wins over one that holds it.
FOLDERS = ("trainteam", "agents", "workflows", "curation", "trainers", "graph", "prompts", "skills")
# Where the task's value changes shape between the task and TRL's config: (tag, candidates). A candidate is a
# function name or Class.method found in the project's source (every match is hooked), or "trl:Class.method".
VALUE_MOMENTS = (
    ("stage", ("resolve_stage",)),  # the stage resolver: task + decisions -> TrainConfig
    ("task", ("TrainTask.train_config",)),  # the task's stage block read as a TrainConfig
    ("retry", ("retry_config",)),  # a failed gate's plan applied to it
    ("args", ("common_args", "trl:SFTConfig.__init__")),  # the TrainConfig turned into TRL's arguments
)
stacks: dict[str, list[str]] = {}
moments: list[dict] = []  # {"tag", "thread", "stack"} in the order they happened
hooked: dict[str, list[str]] = {}  # tag -> what was hooked ("workflows/steps/retry.py:retry_config")


def _project_dirs() -> list[tuple[str, str]]:
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
            return f"{folder}/{filename[len(prefix) :]}"
    return None


def project_frames() -> list[str]:
    """The project frames of the current thread's stack, outermost first, as 'path:line:function'."""
    return [
        f"{path}:{fr.lineno}:{fr.name}"
        for fr in traceback.extract_stack()
        if (path := project_path(fr.filename)) is not None
    ]


def capture(tag: str) -> None:
    stacks[tag] = project_frames()


def _module_name(prefix: str, folder: str, file: Path) -> str:
    rel = file.relative_to(prefix).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["trainteam"] + ([] if folder == "trainteam" else [folder]) + parts)


def find_defs(candidate: str) -> list[tuple[str, str | None, str]]:
    """(module, class or None, function) for every definition of ``name`` or ``Class.name`` in the project."""
    cls_name, _, name = candidate.rpartition(".")
    found = []
    for prefix, folder in PROJECT:
        for file in sorted(Path(prefix).rglob("*.py")):
            if project_path(str(file)) != f"{folder}/{file.relative_to(prefix)}":
                continue  # a subpackage folder scanned on its own
            tree = ast.parse(file.read_text(encoding="utf-8"))
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and node.name == name and not cls_name:
                    found.append((_module_name(prefix, folder, file), None, name))
                if isinstance(node, ast.ClassDef) and (not cls_name or node.name == cls_name):
                    if any(isinstance(f, ast.FunctionDef) and f.name == name for f in node.body):
                        found.append((_module_name(prefix, folder, file), node.name, name))
    return found


def _record(tag: str, original) -> None:
    code, stack = original.__code__, project_frames()
    if (path := project_path(code.co_filename)) is not None:  # TRL's own function is not a project file
        stack.append(f"{path}:{code.co_firstlineno}:{code.co_name}")
    moments.append({"tag": tag, "thread": threading.get_ident(), "stack": stack})


def _wrap(tag: str, original):
    @functools.wraps(original)
    def moment(*args, **kwargs):
        _record(tag, original)
        return original(*args, **kwargs)

    return moment


def _rebind(original, wrapper) -> None:
    """Every project module imported so far that holds ``original`` by name (``from m import f``) gets the wrapper."""
    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("trainteam"):
            for attr, value in list(vars(module).items()):
                if value is original:
                    setattr(module, attr, wrapper)


def hook(tag: str, candidate: str) -> list[str]:
    if candidate.startswith("trl:"):
        import trl

        cls_name, name = candidate[len("trl:") :].split(".")
        cls = getattr(trl, cls_name)
        setattr(cls, name, _wrap(tag, getattr(cls, name)))
        return [candidate]
    done = []
    for module_name, cls_name, name in find_defs(candidate):
        module = importlib.import_module(module_name)
        owner = getattr(module, cls_name) if cls_name else module
        original = vars(owner)[name]
        if isinstance(original, (staticmethod, classmethod)):
            continue
        wrapper = _wrap(tag, original)
        setattr(owner, name, wrapper)
        if cls_name is None:
            _rebind(original, wrapper)
        done.append(f"{project_path(original.__code__.co_filename)}:{candidate}")
    return done


def value_moments() -> list[dict]:
    """The latest moment of each tag in this thread since it last built another trainer, in the order they came."""
    mine = [m for m in moments if m["thread"] == threading.get_ident()]
    latest = {m["tag"]: i for i, m in enumerate(mine)}
    return [{"tag": mine[i]["tag"], "stack": mine[i]["stack"]} for i in sorted(latest.values())]


def report() -> None:
    files: list[str] = []
    for tag in ("cli", "agent", "sft"):
        for entry in stacks.get(tag, []):
            path = entry.split(":", 1)[0]
            if path not in files:
                files.append(path)
    print(
        "WALK " + json.dumps({"files": files, "stacks": stacks, "value": value_moments(), "hooked": hooked}), flush=True
    )


def patch() -> None:
    import dbos
    import pydantic_ai
    import transformers
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

    for tag, candidates in VALUE_MOMENTS:
        hooked[tag] = next((done for candidate in candidates if (done := hook(tag, candidate))), [])

    trainer_init = transformers.Trainer.__init__

    def other_trainer(self, *args, **kwargs):
        # another stage's trainer: the moments before it were that stage's
        moments[:] = [m for m in moments if m["thread"] != threading.get_ident()]
        return trainer_init(self, *args, **kwargs)

    transformers.Trainer.__init__ = other_trainer

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
