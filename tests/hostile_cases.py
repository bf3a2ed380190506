"""Hostile inputs, generated: bad task files, specs, CLI arguments, data, requests, environments
and damaged workspaces — each run as the real CLI in a subprocess on its own copy of a used
workspace, and judged the way a person meets it.

A case is *clear* when it exits 2 with exactly one line on stderr, no traceback, within
``LIMIT_S``, and leaves the workspace (every table of trainteam.db and dbos.sqlite, every
file) and the working folder as they were. Anything else is counted under what went wrong:
traceback / hang / accepted (exit 0) / late (exit 1: a run was created and failed) /
not one line / changed (the workspace or working folder was written).

``python tests/hostile_cases.py`` prints the counts per kind (the issue's table);
tests/task/test_hostile_inputs.py asserts every case is clear.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import yaml

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from spine_helpers import DATA, TINY_TASK  # noqa: E402

LIMIT_S = 60.0  # a safety net, not a speed test: a case that hangs never exits; a busy machine's slow one does
KINDS = (
    "ids",
    "secrets",
    "bounds",
    "hangs",
    "tracebacks",
    "late",
    "damaged",
    "cli",
    "requests",
    "specs",
    "empty",
    "unbounded",
    "duplicates",
    "writes",
    "providers",
)


@dataclass
class Case:
    kind: str
    name: str
    argv: list[str]  # after `trainteam -w WS`; "{ws}" and "{cwd}" are filled in
    files: dict[str, bytes | str] = field(default_factory=dict)  # written into the working folder
    env: dict[str, str] = field(default_factory=dict)
    expect: str = ""  # a substring the one line must hold (the field / file named)
    setup: Callable[[Path, Path], None] | None = None  # (workspace, cwd) before the snapshot
    workspace: bool = True  # pass -w WS


@dataclass
class Outcome:
    case: Case
    verdict: str
    rc: int | None
    seconds: float
    stderr: str
    why: str = ""


def task_yaml(**changes) -> str:
    body = json.loads(json.dumps(TINY_TASK))
    for path, value in changes.items():
        node = body
        keys = path.split(".")
        for k in keys[:-1]:
            node = node.setdefault(k, {})
        if value is _DROP:
            node.pop(keys[-1], None)
        else:
            node[keys[-1]] = value
    return yaml.safe_dump(body)


_DROP = object()


def _task_case(kind: str, name: str, expect: str, text: str | bytes, **kw) -> Case:
    return Case(
        kind,
        name,
        ["execute-workflow", "train_model", "--task", "{cwd}/task.yaml"],
        files={"task.yaml": text, **kw.pop("files", {})},
        expect=expect,
        **kw,
    )


# --- values without bounds -----------------------------------------------------------------

NUMERIC = {  # field: the bad values to try (YAML scalars, written verbatim)
    "budget.max_wall_minutes": ["-5", "0", "599940", "1.0e+999", ".nan", ".inf", "soon", "[]"],
    "budget.max_cost_usd": ["-1", "1.0e+999", ".nan", "1.0e+12"],
    "budget.cost_per_hour_usd": ["-1", ".inf", "1.0e+9"],
    "budget.extension_minutes": ["0", "-3", ".inf", "1.0e+9"],
    "data.n_train": ["0", "-1", "1.0e+18", "1000000000000000000", "abc", "2.5"],
    "data.n_eval": ["0", "1.0e+18", "1000000000000000000"],
    "data.max_operand": ["0", "1.0e+30", "-4"],
    "data.seed": ["-1", "1.0e+30", "x"],
    "data.inject_leaks": ["-1", "1000000000"],
    "eval.max_new_tokens": ["0", "1.0e+18", "1000000000000000000", "-2"],
    "eval.batch_size": ["0", "1.0e+18"],
    "model.hidden_size": ["0", "-32", "1.0e+18", "33"],
    "model.num_layers": ["0", "1.0e+18"],
    "model.num_heads": ["0", "1.0e+18", "3"],
    "model.max_position_embeddings": ["0", "1.0e+18"],
    "model.vocab_size": ["0", "1.0e+18", "1000000000000000000"],
    "tokenizer.vocab_size": ["10", "1.0e+18", "1000000000000000000"],
    "tokenizer.min_frequency": ["0", "1.0e+18"],
    "training.pretrain.max_steps": ["0", "-1", "1.0e+18"],
    "training.pretrain.per_device_batch_size": ["0", "1.0e+18"],
    "training.pretrain.learning_rate": ["0", "-0.1", ".nan", ".inf", "1.0e+9"],
    "training.pretrain.seq_len": ["0", "1.0e+18"],
    "training.pretrain.grad_accum": ["0", "1.0e+18"],
    "training.pretrain.warmup_steps": ["-1", "1.0e+18"],
    "training.pretrain.save_steps": ["0", "1.0e+18"],
    "training.pretrain.logging_steps": ["0"],
    "training.pretrain.max_grad_norm": ["0", ".nan", ".inf"],
    "training.pretrain.threads": ["0", "1.0e+18"],
    "threads": ["0", "-4", "1.0e+18"],
    "final_tolerance": ["-1", ".nan", ".inf"],
    "gates.pretrain.min": [".nan", ".inf", "-1"],  # TINY_TASK gates pretrain on heldout_loss, in [0, inf)
    "gates.pretrain.max": [".nan", "-1"],
    "gates.pretrain.max_regression": ["-1", ".nan"],
}


def bounds_cases() -> list[Case]:
    cases = []
    for path, values in NUMERIC.items():
        for value in values:
            text = task_yaml(**{path: "__V__"}).replace("__V__", value).replace("'", "")
            cases.append(_task_case("bounds", f"{path}={value}", path.rsplit(".", 1)[-1], text))
    return cases


# --- structure, files and encodings: what reading a file can do ------------------------------


def _deep(n: int) -> str:
    return "[" * n + "]" * n


BOMB = (
    "\n".join(
        ["a: &a [x, x, x, x, x, x, x, x, x]"]
        + [
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
            f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]"
            for i in range(8)
        ]
    )
    + "\n"
)


def _symlink_loop(ws: Path, cwd: Path) -> None:
    (cwd / "task.yaml").unlink(missing_ok=True)
    os.symlink(cwd / "loop_b", cwd / "task.yaml")
    os.symlink(cwd / "task.yaml", cwd / "loop_b")


def _fifo(ws: Path, cwd: Path) -> None:
    (cwd / "task.yaml").unlink(missing_ok=True)
    os.mkfifo(cwd / "task.yaml")


def file_cases() -> list[Case]:
    good = task_yaml()
    c = [
        _task_case("hangs", "alias bomb task", "task.yaml", BOMB),
        _task_case(
            "hangs",
            "alias bomb inside a valid task",
            "task.yaml",
            good + "x_bomb:\n" + "".join("  " + line + "\n" for line in BOMB.splitlines()),
        ),
        _task_case("tracebacks", "100k-deep nesting", "task.yaml", _deep(100_000)),
        _task_case("tracebacks", "1k-deep mapping", "task.yaml", "a: " + "{b: " * 1000 + "1" + "}" * 1000),
        _task_case("hangs", "2 MB task file", "task.yaml", good + "description: " + "x" * (2 << 20) + "\n"),
        _task_case("tracebacks", "not UTF-8", "task.yaml", good.encode() + b"description: \xff\xfe\xfa\n"),
        _task_case("tracebacks", "UTF-16", "task.yaml", good.encode("utf-16")),
        _task_case("tracebacks", "binary garbage", "task.yaml", bytes(range(256)) * 4),
        _task_case("tracebacks", "NUL bytes", "task.yaml", good + "\x00\x00"),
        _task_case("tracebacks", "a list", "task.yaml", "- 1\n- 2\n"),
        _task_case("tracebacks", "a scalar", "task.yaml", "42\n"),
        _task_case("tracebacks", "empty", "task.yaml", ""),
        _task_case("tracebacks", "null", "task.yaml", "null\n"),
        _task_case("tracebacks", "unclosed", "task.yaml", "name: [unclosed\n"),
        _task_case("tracebacks", "tabs", "task.yaml", "name:\ttiny\n\tmodel: {}\n"),
        _task_case("tracebacks", "duplicate anchors", "task.yaml", "a: &x 1\nb: *y\n"),
        _task_case("tracebacks", "python tag", "task.yaml", "!!python/object/apply:os.system ['echo hi']\n"),
        _task_case("tracebacks", "symlink loop", "task.yaml", good, setup=_symlink_loop),
        _task_case("hangs", "a FIFO", "task.yaml", good, setup=_fifo),
        Case(
            "hangs", "--task /dev/zero", ["execute-workflow", "train_model", "--task", "/dev/zero"], expect="/dev/zero"
        ),
        Case("tracebacks", "--task a folder", ["execute-workflow", "train_model", "--task", "{cwd}"], expect="folder"),
        Case(
            "tracebacks",
            "--task missing",
            ["execute-workflow", "train_model", "--task", "{cwd}/nope.yaml"],
            expect="nope.yaml",
        ),
        Case(
            "tracebacks",
            "--task /etc/shadow-like unreadable",
            ["execute-workflow", "train_model", "--task", "/proc/self/mem"],
            expect="/proc/self/mem",
        ),
    ]
    return c


# --- fields accepted then failing inside the run ----------------------------------------------

ROWS = {"good": '{"prompt": "1+1=", "completion": "2"}\n' * 4}


def _data_task(
    train: str = "train.jsonl", eval_: str = "eval.jsonl", stages: tuple = ("pretrain", "sft"), **changes
) -> str:
    """A task on data files: pretrain then SFT, or SFT alone on a local model (``stages=["sft"]``)."""
    return task_yaml(
        **{
            "data": {"path": train, "eval_path": eval_},
            "stages": list(stages),
            "training": {s: {"max_steps": 2, "seq_len": 32} for s in stages},
            "gates": {s: {"metric": "heldout_loss", "max": 50.0} for s in stages},
            **changes,
        }
    )


def late_cases() -> list[Case]:
    good = ROWS["good"]
    c = [
        _task_case("late", "gate metric vibes", "vibes", task_yaml(**{"gates.pretrain.metric": "vibes"})),
        _task_case(
            "late",
            "gate on an unmeasured lm_eval name",
            "metric",
            task_yaml(**{"gates.pretrain": {"metric": "lm_eval_acc", "min": 0.5}}),
        ),
        _task_case("late", "gate without a test", "gate", task_yaml(**{"gates.pretrain": {"metric": "exact_match"}})),
        _task_case(
            "late", "exact match of 2", "min", task_yaml(**{"gates.pretrain": {"metric": "exact_match", "min": 2}})
        ),
        _task_case("late", "eval metric bleu", "rouge_l", task_yaml(eval={"metrics": ["rouge_l", "bleu"]})),
        _task_case(
            "late",
            "rouge_l above 1",
            "rouge_l lies in",
            task_yaml(**{"gates.pretrain": {"metric": "rouge_l", "min": 1.5}}),
        ),
        _task_case("late", "tracker wandb", "tracker", task_yaml(**{"training.pretrain.tracker": "wandb"})),
        _task_case("late", "tracker unknown", "tracker", task_yaml(**{"training.pretrain.tracker": "comet"})),
        _task_case(
            "late", "training output_dir", "output_dir", task_yaml(**{"training.pretrain.output_dir": "/tmp/x"})
        ),
        _task_case("late", "training resume never", "resume", task_yaml(**{"training.pretrain.resume": "never"})),
        _task_case("late", "training resume path", "resume", task_yaml(**{"training.pretrain.resume": "/tmp"})),
        _task_case("late", "unknown approval step", "require_approval", task_yaml(require_approval=["trian"])),
        _task_case("late", "other workflow", "workflow", task_yaml(workflow="prep_only")),
        _task_case("late", "no stages", "stages", task_yaml(stages=[])),
        _task_case("late", "only dpo", "stages", task_yaml(stages=["dpo"])),
        _task_case("late", "unknown stage", "stages", task_yaml(stages=["rlhf"])),
        _task_case("late", "sft without a model to fine-tune", "model.path", task_yaml(stages=["sft"], gates={})),
        _task_case("late", "training of an absent stage", "sft", task_yaml(**{"training.sft": {"max_steps": 2}})),
        _task_case(
            "late",
            "a planner-refused model",
            "training.pretrain",
            task_yaml(
                **{
                    "model": {
                        "hidden_size": 65536,
                        "num_layers": 1024,
                        "num_heads": 1024,
                        "max_position_embeddings": 64,
                    }
                }
            ),
        ),
        _task_case(
            "late",
            "seq_len past memory",
            "training.pretrain",
            task_yaml(**{"training.pretrain.seq_len": 1 << 20, "training.pretrain.per_device_batch_size": 65536}),
        ),
        _task_case("late", "name with a slash", "name", task_yaml(name="../escape")),
        _task_case("late", "name too long", "name", task_yaml(name="n" * 300)),
        _task_case(
            "late", "demo and path", "data", task_yaml(**{"data.path": "train.jsonl"}), files={"train.jsonl": good}
        ),
        _task_case("late", "curation unknown field", "curation", task_yaml(curation={"dedupe": True})),
        _task_case(
            "late", "answer pattern not a regex", "answer.pattern", task_yaml(answer={"kind": "regex", "pattern": "(["})
        ),
        _task_case(
            "late",
            "battery answer_pattern (moved to answer)",
            "answer_pattern",
            task_yaml(
                curriculum=[{"name": "pretrain", "battery": {"metrics": ["exact_match"], "answer_pattern": r"-?\d+"}}]
            ),
        ),
        _task_case(
            "late",
            "answer verifier that does not import",
            "answer.function",
            task_yaml(answer={"kind": "verifier", "function": "no_such_module_here:check"}),
        ),
        _task_case(
            "late", "answer labels on an exact answer", "answer.labels", task_yaml(answer={"labels": ["a", "b"]})
        ),
        # data files
        _task_case(
            "late", "data.path a folder", "data.path", _data_task(train="sub"), files={"sub/x": "", "eval.jsonl": good}
        ),
        _task_case(
            "late", "data.path /dev/zero", "data.path", _data_task(train="/dev/zero"), files={"eval.jsonl": good}
        ),
        _task_case(
            "late",
            "data.eval_path missing",
            "data.eval_path",
            _data_task(eval_="nope.jsonl"),
            files={"train.jsonl": good},
        ),
        _task_case(
            "late",
            "data invalid JSON",
            "train.jsonl:3",
            _data_task(),
            files={"train.jsonl": good[:80] + "{not json\n", "eval.jsonl": good},
        ),
        _task_case(
            "late",
            "data without prompt/completion",
            "train.jsonl:1",
            _data_task(),
            files={"train.jsonl": '{"q": "1+1", "a": "2"}\n', "eval.jsonl": good},
        ),
        _task_case(
            "late",
            "eval without completion",
            "eval.jsonl:1",
            _data_task(),
            files={"train.jsonl": good, "eval.jsonl": '{"prompt": "1+1="}\n'},
        ),
        _task_case(
            "late",
            "completion a number",
            "completion",
            _data_task(),
            files={"train.jsonl": '{"prompt": "1+1=", "completion": 2}\n', "eval.jsonl": good},
        ),
        _task_case(
            "late",
            "rows are lists",
            "train.jsonl:1",
            _data_task(),
            files={"train.jsonl": '["1+1=", "2"]\n', "eval.jsonl": good},
        ),
        _task_case(
            "late", "empty data file", "train.jsonl", _data_task(), files={"train.jsonl": "", "eval.jsonl": good}
        ),
        _task_case(
            "late",
            "data not UTF-8",
            "train.jsonl:2",
            _data_task(),
            files={"train.jsonl": good.encode()[:38] + b'{"prompt": "\xff", "completion": "1"}\n', "eval.jsonl": good},
        ),
        _task_case(
            "late",
            "model.path /etc",
            "model.path",
            _data_task(stages=["sft"], **{"model": {"path": "/etc"}}),
            files={"train.jsonl": good, "eval.jsonl": good},
        ),
        _task_case(
            "late",
            "model.path a file",
            "model.path",
            _data_task(stages=["sft"], **{"model": {"path": "eval.jsonl"}}),
            files={"train.jsonl": good, "eval.jsonl": good},
        ),
        _task_case(
            "late",
            "model.path without weights",
            "model.path",
            _data_task(stages=["sft"], **{"model": {"path": "m"}}),
            files={"train.jsonl": good, "eval.jsonl": good, "m/config.json": "{}"},
        ),
        _task_case(
            "late",
            "model.path pickled weights only",
            "safetensors",
            _data_task(stages=["sft"], **{"model": {"path": "m"}}),
            files={
                "train.jsonl": good,
                "eval.jsonl": good,
                "m/config.json": '{"model_type": "llama"}',
                "m/pytorch_model.bin": "x",
            },
        ),
        _task_case(
            "late",
            "pretrain with model.path",
            "model.path",
            task_yaml(**{"model": {"path": "m"}}),
            files={"m/config.json": '{"model_type": "llama"}', "m/model.safetensors": "x"},
        ),
    ]
    return c


# --- ids -------------------------------------------------------------------------------------


def id_cases(run_id: str, approval_id: str) -> list[Case]:
    t = {"task.yaml": task_yaml()}
    ex = ["execute-workflow", "train_model", "--task", "{cwd}/task.yaml", "--run-id"]
    c = [
        Case("ids", f"--run-id {v!r}", ex + [v], files=t, expect="--run-id")
        for v in (
            "../../escaped-run",
            "/tmp/abs-run",
            "a/b",
            "..",
            ".hidden",
            "r" * 300,
            "",
            "a b",
            "%",
            "run*",
            "a\nb",
            "ünïcode",
            "-flaglike",
        )
    ]
    c.append(Case("ids", "--run-id of an existing run", ex + [run_id], files=t, expect="already exists"))
    for cmd in (["runs", "show"], ["runs", "resume"], ["runs", "cancel"], ["runs", "report"], ["replay"]):
        for v in ("%", "../../etc", "r" * 300, "nope-run", run_id.upper()):
            c.append(Case("ids", f"{' '.join(cmd)} {v[:20]!r}", cmd + [v], expect="run"))
    for cmd in (["approvals", "approve"], ["approvals", "reject"], ["approvals", "show"]):
        for v in ("%", "_____%", "_%", approval_id.upper(), approval_id[:3], "", "a" * 300, "x' OR '1'='1"):
            c.append(Case("ids", f"{' '.join(cmd)} {v[:20]!r}", cmd + [v], expect="approval"))
    for cmd in (["models", "show"], ["graph", "lineage"]):
        for v in ("%", "_", "a" * 300):
            c.append(Case("ids", f"{' '.join(cmd)} {v[:20]!r}", cmd + [v]))
    return c


# --- CLI options and the environment -----------------------------------------------------------


def cli_cases(run_id: str) -> list[Case]:
    c = [
        Case("cli", f"runs list --limit {v}", ["runs", "list", "--limit", v], expect="limit")
        for v in ("0", "-1", str(10**30), "abc", "1e3")
    ]
    c += [
        Case("cli", f"approvals list --status {v}", ["approvals", "list", "--status", v], expect="status")
        for v in ("bogus", "PENDING", "")
    ]
    c += [Case("cli", "approvals list --run %", ["approvals", "list", "--run", "%"], expect="run")]
    c += [
        Case("cli", f"graph export --out {v}", ["graph", "export", "--out", v], expect="--out")
        for v in ("{cwd}/missing/dir/g.json", "{cwd}", "/dev/full/x.json")
    ]
    c += [
        Case("cli", f"runs report --out {v}", ["runs", "report", run_id, "--out", v], expect="--out")
        for v in ("{cwd}/missing/dir/r", "/dev/null")
    ]
    c += [
        Case("cli", f"plan --params {v}", ["plan", "--params", v], expect="params")
        for v in ("nan", "inf", "-1", "0", "abc", "1e999", "1e30")
    ]
    c += [
        Case("cli", f"plan {o} {v}", ["plan", "--params", "1e6", o, v], expect=o)
        for o, v in (
            ("--vocab-size", "0"),
            ("--vocab-size", "-1"),
            ("--global-batch", "0"),
            ("--port", "0"),
            ("--port", "99999"),
            ("--launcher", "nope"),
            ("--model", "/dev/zero"),
            ("--config", "{cwd}"),
            ("--hardware", "{cwd}/missing.yaml"),
        )
    ]
    c += [Case("cli", "unknown command", ["frobnicate"]), Case("cli", "unknown option", ["runs", "list", "--frob"])]
    env_cases = {
        "TRAINTEAM_DATABASE_URL=notaurl://x": ({"TRAINTEAM_DATABASE_URL": "notaurl://x"}, "TRAINTEAM_DATABASE_URL"),
        "TRAINTEAM_DATABASE_URL=garbage": ({"TRAINTEAM_DATABASE_URL": "garbage"}, "TRAINTEAM_DATABASE_URL"),
        "TRAINTEAM_DATABASE_URL=sqlite in a missing dir": (
            {"TRAINTEAM_DATABASE_URL": "sqlite:///{cwd}/missing/dir/x.db"},
            "TRAINTEAM_DATABASE_URL",
        ),
        "TRAINTEAM_MODEL without a provider": ({"TRAINTEAM_MODEL": "gpt4"}, "TRAINTEAM_MODEL"),
        "TRAINTEAM_MODEL unknown provider": ({"TRAINTEAM_MODEL": "nosuch:model"}, "TRAINTEAM_MODEL"),
    }
    for name, (env, expect) in env_cases.items():
        c.append(
            Case(
                "cli",
                name + " (execute)",
                ["execute-workflow", "train_model", "--task", "{cwd}/task.yaml"],
                files={"task.yaml": task_yaml()},
                env=env,
                expect=expect,
            )
        )
        if "DATABASE" in name:  # readers never talk to a model
            c.append(Case("cli", name + " (runs list)", ["runs", "list"], env=env, expect=expect))
    c.append(
        Case(
            "cli",
            "TRAINTEAM_HOME a file",
            ["runs", "list"],
            files={"home": "x"},
            env={"TRAINTEAM_HOME": "{cwd}/home"},
            expect="workspace",
            workspace=False,
        )
    )
    c.append(
        Case(
            "cli",
            "-w a file",
            ["-w", "{cwd}/home", "runs", "list"],
            files={"home": "x"},
            expect="workspace",
            workspace=False,
        )
    )
    return c


# --- requests in plain words ---------------------------------------------------------------------

REQUEST = "pretrain a tiny llama on the addition demo within {b}"


def request_cases() -> list[Case]:
    sub = ["submit", "--yes"]  # an accepted request would start: the parser alone must refuse it
    bad = {
        "9999 hours": REQUEST.format(b="9999 hours"),
        "-5 minutes": REQUEST.format(b="-5 minutes"),
        "0 minutes": REQUEST.format(b="0 minutes"),
        "1e999 minutes": REQUEST.format(b="1e999 minutes"),
        "8,000 digits": REQUEST.format(b="9" * 8000 + " minutes"),
        "long request": REQUEST.format(b="30 minutes") + " please" * 2000,
        "empty": "",
        "spaces": "   \n\t ",
        "no budget": "pretrain a tiny llama on the addition demo",
        "no data": "pretrain a tiny llama within 30 minutes",
        "no model": "train on the addition demo within 30 minutes",
        "a hub download": "fine-tune a model from hugging face on the addition demo within 30 minutes",
        "path traversal data": (
            "fine-tune base/ on ../../../../etc/passwd.jsonl and eval on ../../x.jsonl within 30 minutes"
        ),
        "$ -5": REQUEST.format(b="30 minutes and $-5"),
        "trust remote code": REQUEST.format(b="30 minutes") + " with trust_remote_code: true",
        "secret-shaped only": "sk-abcdefghijklmnopqrstuvwxyz0123",
        "NUL": REQUEST.format(b="30 minutes") + "\x00",
    }
    c = [Case("requests", name, sub + [text]) for name, text in bad.items() if "\x00" not in text]
    c.append(Case("requests", "terminal escapes", sub + [REQUEST.format(b="30 minutes") + " \x1b[2J\x1b]0;x\x07"]))
    c.append(
        Case(
            "requests",
            "unreachable model provider",
            sub + [REQUEST.format(b="30 minutes")],
            env={"TRAINTEAM_MODEL": "openai:x", "TRAINTEAM_MODEL_BASE_URL": "http://127.0.0.1:9/v1"},
            expect="127.0.0.1",
        )
    )
    return c


# --- workflow specs ------------------------------------------------------------------------------


def _spec(**changes) -> str:
    spec = yaml.safe_load((DATA / "prep_only.yaml").read_text())
    spec.update(changes)
    return yaml.safe_dump(spec)


def _gated(*loops: int) -> str:
    """A spec whose gate loops back to its first step along ``loops`` edges (one per max_loops given)."""
    steps = [
        {"name": "prepare_corpus", "persona": "data_curator", "tool": "prepare_corpus"},
        {"name": "gate", "persona": "eval_judge", "tool": "gate", "gate": True},
    ]
    edges = [{"from": "prepare_corpus", "to": "gate"}] + [
        {"from": "gate", "to": "prepare_corpus", "when": w, "max_loops": n}
        # strict=False: one edge per max_loops given, taking the first len(loops) of these conditions
        for w, n in zip(("failed", "passed", "*", "skipped"), loops, strict=False)
    ]
    return _spec(steps=steps, edges=edges, start="prepare_corpus")


def spec_cases() -> list[Case]:
    step = {"name": "prepare_corpus", "persona": "data_curator", "tool": "prepare_corpus"}
    bad = {
        "alias bomb": (BOMB, "spec.yaml"),
        "100k-deep": (_deep(100_000), "spec.yaml"),
        "2 MB": (_spec(description="x" * (2 << 20)), "spec.yaml"),
        "not UTF-8": (_spec().encode() + b"\xff\n", "spec.yaml"),
        "unknown tool": (_spec(steps=[{**step, "tool": "rm_rf"}]), "tool"),
        "tool not on the card": (_spec(steps=[{**step, "tool": "train"}]), "tool"),
        "unknown persona": (_spec(steps=[{**step, "persona": "intern"}]), "persona"),
        "bad step name": (_spec(steps=[{**step, "name": "../x"}]), "name"),
        "start unknown": (_spec(start="nowhere"), "start"),
        "edge to nowhere": (_spec(edges=[{"from": "prepare_corpus", "to": "void"}]), "edges"),
        "a list": ("- a\n", "spec.yaml"),
        "no steps": (_spec(steps=[]), "steps"),
        "a loop allowed 10^9 times": (_gated(10**9), "max_loops"),
        "loops over 30 passes in all": (_gated(10, 10, 10, 1), "at most 30"),
        "101 steps": (_spec(steps=[{**step, "name": f"s{i}"} for i in range(101)], start="s0"), "at most 100"),
        "a step name of 100 characters": (_spec(steps=[{**step, "name": "s" * 100}], start="s" * 100), "name"),
    }
    c = []
    for name, (text, expect) in bad.items():
        files = {"spec.yaml": text, "task.yaml": task_yaml(workflow="prep_only")}
        c.append(
            Case("specs", f"validate: {name}", ["workflows", "validate", "{cwd}/spec.yaml"], files=files, expect=expect)
        )
        c.append(
            Case(
                "specs",
                f"execute: {name}",
                ["execute-workflow", "{cwd}/spec.yaml", "--task", "{cwd}/task.yaml"],
                files=files,
                expect=expect,
            )
        )
    return c


# --- damaged workspaces --------------------------------------------------------------------------


def _garble(name: str, how: str) -> Callable[[Path, Path], None]:
    def damage(ws: Path, cwd: Path) -> None:
        path = ws / name
        data = path.read_bytes()
        if how == "garbled":
            path.write_bytes(b"this is not a database at all" + data[64:])
        elif how == "truncated":
            path.write_bytes(data[: len(data) // 3])
        elif how == "zeroed":
            path.write_bytes(b"\0" * len(data))
        elif how == "empty":
            path.write_bytes(b"")

    return damage


def damaged_cases(run_id: str, approval_id: str) -> list[Case]:
    cmds = {
        "runs list": ["runs", "list"],
        "runs show": ["runs", "show", run_id],
        "approvals list": ["approvals", "list"],
        "approve": ["approvals", "approve", approval_id],
        "execute": ["execute-workflow", "train_model", "--task", "{cwd}/task.yaml"],
    }
    c = []
    for db in ("trainteam.db", "dbos.sqlite"):
        for how in ("garbled", "truncated", "zeroed", "empty"):
            for cname, argv in cmds.items():
                if db == "dbos.sqlite" and cname in ("runs list", "runs show", "approvals list"):
                    continue  # readers never open the engine's database
                c.append(
                    Case(
                        "damaged",
                        f"{db} {how}: {cname}",
                        argv,
                        files={"task.yaml": task_yaml()},
                        setup=_garble(db, how),
                        expect=db,
                    )
                )
    return c


def secret_cases(approval_id: str) -> list[Case]:
    """Secret-shaped values where an id or a name goes: masked in every record, they would
    break the paths and lookups made from them, so they are refused."""
    keys = (
        "sk-hostile0123456789abcdefghij",
        "hf_abcdefghijklmnopqrstuvwxyz012345",
        "ghp_abcdefghijklmnopqrstuvwxyz0123",
    )
    ex = ["execute-workflow", "train_model", "--task", "{cwd}/task.yaml"]
    c = [
        Case(
            "secrets",
            f"a key as a run id ({k[:3]})",
            ex + ["--run-id", k],
            files={"task.yaml": task_yaml()},
            expect="--run-id",
        )
        for k in keys
    ]
    c += [
        Case("secrets", f"a key as the task name ({k[:3]})", ex, files={"task.yaml": task_yaml(name=k)}, expect="name")
        for k in keys
    ]
    c += [
        Case(
            "secrets",
            f"a key as the decider ({k[:3]})",
            ["approvals", "approve", approval_id, "--by", k],
            expect="--by",
        )
        for k in keys
    ]
    return c


# --- the input classes a hidden probe let through (empty, unbounded, duplicate keys, writes, providers) -----

BIG = 2 << 20  # a row twice the default bound (1 MiB)


def _curate(name: str, expect: str, files: dict, *args: str, kind: str = "empty") -> Case:
    return Case(kind, f"curate run: {name}", ["curate", "run", *args], files=files, expect=expect)


def _row(n: int) -> str:
    return json.dumps({"prompt": "x" * n, "completion": "y"}) + "\n"


def empty_cases() -> list[Case]:
    good = ROWS["good"]
    c = [
        _curate("an empty file", "no rows", {"e.jsonl": ""}, "{cwd}/e.jsonl"),
        _curate("only blank lines", "no rows", {"b.jsonl": "\n  \n\t\n"}, "{cwd}/b.jsonl"),
        _curate("a byte-order mark only", "no rows", {"b.jsonl": "\ufeff\n"}, "{cwd}/b.jsonl"),
        _curate("an empty CSV (a header)", "no rows", {"e.csv": "prompt,completion\n"}, "{cwd}/e.csv"),
        _curate("an empty JSON list", "no rows", {"e.json": "[]"}, "{cwd}/e.json"),
        _curate("an empty text file", "no rows", {"e.txt": "\n\n"}, "{cwd}/e.txt"),
        _curate("a folder of empty files", "no rows", {"d/a.jsonl": "", "d/b.jsonl": "\n"}, "{cwd}/d"),
        _curate(
            "only malformed lines, skipped", "no usable row", {"m.jsonl": "{no\n[1]\n"}, "{cwd}/m.jsonl", "--skip-bad"
        ),
        _curate("/dev/null", "/dev/null", {}, "/dev/null"),
        _curate("/dev/zero", "/dev/zero", {}, "/dev/zero"),
        _curate(
            "every row removed by the row checks",
            "no row is left of 3",
            {"r.jsonl": '{"prompt": "a", "completion": " "}\n' * 3},
            "{cwd}/r.jsonl",
        ),
        _curate(
            "every text removed by the quality filter",
            "no row is left of 3",
            {"t.jsonl": "".join(json.dumps({"text": f"short {i}"}) + "\n" for i in range(3))},
            "{cwd}/t.jsonl",
        ),
        _task_case(
            "empty",
            "data.path only blank lines",
            "no rows",
            _data_task(),
            files={"train.jsonl": "\n\n", "eval.jsonl": good},
        ),
        _task_case(
            "empty", "data.eval_path empty", "no rows", _data_task(), files={"train.jsonl": good, "eval.jsonl": ""}
        ),
        _task_case(
            "empty", "data.path /dev/null", "data.path", _data_task(train="/dev/null"), files={"eval.jsonl": good}
        ),
        Case(
            "empty",
            "curate build sft: an empty file",
            ["curate", "build", "sft", "{cwd}/e.jsonl"],
            files={"e.jsonl": ""},
            expect="no rows",
        ),
        Case(
            "empty",
            "curate build sft: no trace qualifies",
            ["curate", "build", "sft", "{cwd}/t.jsonl", "--min-reward", "2"],
            files={"t.jsonl": json.dumps({"prompt": "1+1=", "completion": "2", "reward": 1.0}) + "\n"},
            expect="no sft row is built",
        ),
    ]
    return c


def unbounded_cases() -> list[Case]:
    good = ROWS["good"]
    return [
        _curate(
            "one 50 MB line",
            "a row of more than 1,048,576 bytes",
            {"l.jsonl": _row(50 << 20)},
            "{cwd}/l.jsonl",
            kind="unbounded",
        ),
        _curate(
            "a long row after good ones", "l.jsonl:5", {"l.jsonl": good + _row(BIG)}, "{cwd}/l.jsonl", kind="unbounded"
        ),
        _curate(
            "a long text row",
            "a row of more than",
            {"l.jsonl": json.dumps({"text": "word " * (BIG // 5)})},
            "{cwd}/l.jsonl",
            kind="unbounded",
        ),
        _curate(
            "a long CSV row",
            "l.csv:3",
            {"l.csv": "prompt,completion\na,b\n" + "x" * BIG + ",y\n"},
            "{cwd}/l.csv",
            kind="unbounded",
        ),
        _curate(
            "a long JSON row",
            "l.json: row 0",
            {"l.json": json.dumps([{"prompt": "x" * BIG, "completion": "y"}])},
            "{cwd}/l.json",
            kind="unbounded",
        ),
        _curate(
            "a long paragraph of short lines",
            "l.txt:1",
            {"l.txt": "a short line of words\n" * (BIG // 20)},
            "{cwd}/l.txt",
            kind="unbounded",
        ),
        _task_case(
            "unbounded",
            "data.path one long line",
            "train.jsonl:1",
            _data_task(),
            files={"train.jsonl": _row(BIG), "eval.jsonl": good},
        ),
        _task_case(
            "unbounded",
            "data.eval_path a long row",
            "eval.jsonl:2",
            _data_task(),
            files={"train.jsonl": good, "eval.jsonl": good[:38] + _row(BIG)},
        ),
        _task_case(
            "unbounded",
            "data.max_row_bytes below the rows",
            "train.jsonl:1",
            _data_task(**{"data.max_row_bytes": 1024}),
            files={"train.jsonl": _row(2000), "eval.jsonl": good},
        ),
        _task_case(
            "unbounded",
            "data.max_row_bytes 0",
            "max_row_bytes",
            _data_task(**{"data.max_row_bytes": 0}),
            files={"train.jsonl": good, "eval.jsonl": good},
        ),
        _task_case(
            "unbounded",
            "data.max_row_bytes 10^12",
            "max_row_bytes",
            _data_task(**{"data.max_row_bytes": 10**12}),
            files={"train.jsonl": good, "eval.jsonl": good},
        ),
    ]


def duplicate_cases() -> list[Case]:
    good = task_yaml()
    nested = good.replace("training:\n  pretrain:\n", "training:\n  pretrain:\n    max_steps: 3\n", 1)
    assert nested != good
    spec = _spec()
    return [
        _task_case("duplicates", "a top-level key twice", "key 'name' is given twice", good + "name: other\n"),
        _task_case("duplicates", "a training key twice", "key 'max_steps' is given twice", nested),
        _task_case(
            "duplicates",
            "a key twice in a flow mapping",
            "key 'metric' is given twice",
            good.replace("gates:", "x_gates: {metric: a, metric: b}\ngates:", 1),
        ),
        Case(
            "duplicates",
            "validate: a key twice",
            ["validate", "{cwd}/task.yaml"],
            files={"task.yaml": good + "stages: [pretrain]\n"},
            expect="key 'stages' is given twice",
        ),
        Case(
            "duplicates",
            "a spec key twice",
            ["workflows", "validate", "{cwd}/spec.yaml"],
            files={"spec.yaml": spec + "start: prepare_corpus\n"},
            expect="key 'start' is given twice",
        ),
        Case(
            "duplicates",
            "execute: a spec key twice",
            ["execute-workflow", "{cwd}/spec.yaml", "--task", "{cwd}/task.yaml"],
            files={"spec.yaml": spec + "name: again\n", "task.yaml": task_yaml(workflow="prep_only")},
            expect="key 'name' is given twice",
        ),
        Case(
            "duplicates",
            "curate --config: a key twice",
            ["curate", "run", "{cwd}/t.jsonl", "--config", "{cwd}/c.yaml"],
            files={"t.jsonl": ROWS["good"], "c.yaml": "exact_dedup: true\nexact_dedup: false\n"},
            expect="key 'exact_dedup' is given twice",
        ),
        Case(
            "duplicates",
            "plan --config: a key twice",
            ["plan", "--params", "1e6", "--config", "{cwd}/c.yaml"],
            files={"c.yaml": "max_steps: 5\nmax_steps: 6\n"},
            expect="key 'max_steps' is given twice",
        ),
    ]


def writes_cases() -> list[Case]:
    """A command refused on bad input leaves the workspace and the folders it names as they were."""
    good = ROWS["good"]
    return [
        Case(
            "writes",
            "curate run /dev/null --out",
            ["curate", "run", "/dev/null", "--out", "{cwd}/out"],
            expect="/dev/null",
        ),
        Case(
            "writes",
            "curate run an empty file --out",
            ["curate", "run", "{cwd}/e.jsonl", "--out", "{cwd}/out"],
            files={"e.jsonl": ""},
            expect="no rows",
        ),
        Case(
            "writes",
            "curate run: all removed, --out",
            ["curate", "run", "{cwd}/r.jsonl", "--out", "{cwd}/out/v"],
            files={"r.jsonl": '{"prompt": "a", "completion": " "}\n'},
            expect="no row is left",
        ),
        Case(
            "writes",
            "curate run: a bad --eval",
            ["curate", "run", "{cwd}/t.jsonl", "--eval", "x={cwd}/e.jsonl"],
            files={"t.jsonl": good, "e.jsonl": ""},
            expect="e.jsonl",
        ),
        Case(
            "writes",
            "curate run: a bad --config",
            ["curate", "run", "{cwd}/t.jsonl", "--config", "{cwd}/c.yaml"],
            files={"t.jsonl": good, "c.yaml": "near_dedup: {threshold: 7}\n"},
            expect="c.yaml: near_dedup.threshold",
        ),
        Case(
            "writes",
            "curate run: --heldout-by a missing field",
            ["curate", "run", "{cwd}/t.jsonl", "--heldout-by", "run_id"],
            files={"t.jsonl": good},
            expect="run_id",
        ),
        Case(
            "writes",
            "models import a missing file",
            ["models", "import", "{cwd}/nope.gguf", "--register"],
            expect="nope.gguf",
        ),
        Case(
            "writes",
            "models import an empty GGUF",
            ["models", "import", "{cwd}/e.gguf", "--register"],
            files={"e.gguf": ""},
            expect="e.gguf",
        ),
    ]


def provider_cases() -> list[Case]:
    """A persona's provider that does not answer: refused before the run is stored (port 9 is discard: closed)."""
    refused = {"TRAINTEAM_MODEL_EVAL_JUDGE": "openai:x", "TRAINTEAM_MODEL_BASE_URL_EVAL_JUDGE": "http://127.0.0.1:9/v1"}
    unknown = {
        "TRAINTEAM_MODEL_DATA_CURATOR": "openai:x",
        "TRAINTEAM_MODEL_BASE_URL_DATA_CURATOR": "http://no-such-host.invalid/v1",
    }
    everyone = {
        "TRAINTEAM_MODEL": "openai:x",
        "TRAINTEAM_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
        "TRAINTEAM_MODEL_API_KEY": "sk-provider-key-0123456789abcdef",
    }
    ex = ["execute-workflow", "train_model", "--task", "{cwd}/task.yaml"]
    t = {"task.yaml": task_yaml()}
    return [
        Case("providers", "execute: the judge's URL refuses", ex, files=t, env=refused, expect="127.0.0.1:9"),
        Case("providers", "execute: the curator's host is unknown", ex, files=t, env=unknown, expect="unknown host"),
        Case(
            "providers", "execute: every persona's URL refuses", ex, files=t, env=everyone, expect="connection refused"
        ),
        Case(
            "providers",
            "validate: the judge's URL refuses",
            ["validate", "{cwd}/task.yaml"],
            files=t,
            env=refused,
            expect="TRAINTEAM_MODEL_BASE_URL_EVAL_JUDGE",
        ),
        Case(
            "providers",
            "execute a spec: the judge's URL refuses",
            ["execute-workflow", str(DATA / "prep_only.yaml"), "--task", "{cwd}/task.yaml"],
            files={"task.yaml": task_yaml(workflow="prep_only")},
            env=refused,
            expect="127.0.0.1:9",
        ),
        Case(
            "providers",
            "execute --detach: the judge's URL refuses",
            ex + ["--detach"],
            files=t,
            env=refused,
            expect="127.0.0.1:9",
        ),
    ]


def all_cases(run_id: str, approval_id: str) -> list[Case]:
    return (
        bounds_cases()
        + file_cases()
        + late_cases()
        + id_cases(run_id, approval_id)
        + cli_cases(run_id)
        + request_cases()
        + spec_cases()
        + damaged_cases(run_id, approval_id)
        + secret_cases(approval_id)
        + empty_cases()
        + unbounded_cases()
        + duplicate_cases()
        + writes_cases()
        + provider_cases()
    )


# --- the used workspace, and running one case -------------------------------------------------------


def _cli(ws: Path, *args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "trainteam.cli", "-w", str(ws), *args],
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "TRAINTEAM_THREADS": "1"},
        **kw,
    )


def build_workspace(root: Path) -> tuple[Path, str, str]:
    """A workspace holding a completed run and a run waiting for a person (its process killed)."""
    ws = root / "ws"
    task = root / "prep.yaml"
    task.write_text(task_yaml(workflow="prep_only"))
    done = _cli(
        ws,
        "execute-workflow",
        str(DATA / "prep_only.yaml"),
        "--task",
        str(task),
        "-q",
        "--run-id",
        "done-run-0001",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    waiting = root / "wait.yaml"
    waiting.write_text(task_yaml(workflow="prep_only", require_approval=["prepare_corpus"]))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "trainteam.cli",
            "-w",
            str(ws),
            "execute-workflow",
            str(DATA / "prep_only.yaml"),
            "--task",
            str(waiting),
            "-q",
            "--run-id",
            "wait-run-0001",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    approval = None
    while approval is None and time.monotonic() < deadline:
        time.sleep(0.3)
        out = _cli(ws, "approvals", "list", "--json", timeout=600)
        rows = json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else []
        approval = rows[0]["id"] if rows else None
    proc.kill()
    proc.wait()
    assert approval is not None, "the waiting run never asked"
    for db in ("trainteam.db", "dbos.sqlite"):  # fold the WAL in: a reader's close must not change bytes
        conn = sqlite3.connect(ws / db)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.close()
    return ws, "done-run-0001", approval


def snapshot(folder: Path) -> dict[str, str]:
    """Every file's hash (the databases' WAL folded in as their table contents), and the tree."""
    out: dict[str, str] = {}
    if not folder.exists():
        return out
    for p in sorted(folder.rglob("*")):
        rel = str(p.relative_to(folder))
        if p.is_symlink() or not p.is_file():
            out[rel] = "link" if p.is_symlink() else ("dir" if p.is_dir() else "special")
        elif p.name.endswith(("-wal", "-shm")):
            continue
        else:
            out[rel] = hashlib.sha256(p.read_bytes()).hexdigest()
            if p.suffix in (".db", ".sqlite") and p.stat().st_size:
                out[rel + "#tables"] = _tables(p)
    return out


def _tables(path: Path) -> str:
    try:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            return hashlib.sha256("\n".join(conn.iterdump()).encode()).hexdigest()
        finally:
            conn.close()
    except sqlite3.DatabaseError as exc:
        return f"unreadable: {exc}"


def _fill(s: str, ws: Path, cwd: Path) -> str:
    return s.replace("{ws}", str(ws)).replace("{cwd}", str(cwd))


def run_case(case: Case, template: Path, scratch: Path) -> Outcome:
    ws, cwd = scratch / "ws", scratch / "cwd"
    shutil.copytree(template, ws)
    cwd.mkdir()
    for name, content in case.files.items():
        (cwd / name).parent.mkdir(parents=True, exist_ok=True)
        (cwd / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    if case.setup is not None:
        case.setup(ws, cwd)
    before = (snapshot(ws), snapshot(cwd))
    argv = (
        [sys.executable, "-m", "trainteam.cli"]
        + (["-w", str(ws)] if case.workspace else [])
        + [_fill(a, ws, cwd) for a in case.argv]
    )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TRAINTEAM_THREADS": "1",
        "TRAINTEAM_HOME": str(cwd / ".unused"),
        **{k: _fill(v, ws, cwd) for k, v in case.env.items()},
    }
    started = time.monotonic()
    try:
        proc = subprocess.run(argv, cwd=cwd, capture_output=True, env=env, timeout=LIMIT_S, stdin=subprocess.DEVNULL)
        rc, stderr = proc.returncode, proc.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired as exc:
        rc, stderr = None, (exc.stderr or b"").decode(errors="replace")
    seconds = time.monotonic() - started
    return judge(case, rc, stderr, seconds, before, (snapshot(ws), snapshot(cwd)))


def judge(case: Case, rc: int | None, stderr: str, seconds: float, before, after) -> Outcome:
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    if rc is None:
        return Outcome(case, "hang", rc, seconds, stderr, f"still running after {LIMIT_S:g} s")
    if "Traceback" in stderr or "panicked" in stderr:
        return Outcome(case, "traceback", rc, seconds, stderr, lines[-1] if lines else "")
    if rc == 0:
        return Outcome(case, "accepted", rc, seconds, stderr, "exit 0")
    if rc == 1:
        return Outcome(case, "late", rc, seconds, stderr, lines[-1] if lines else "exit 1")
    if rc != 2:
        return Outcome(case, "traceback", rc, seconds, stderr, f"exit {rc}")
    if before != after:
        changed = sorted(
            {k for k in set(before[0]) | set(after[0]) if before[0].get(k) != after[0].get(k)}
            | {"cwd/" + k for k in set(before[1]) | set(after[1]) if before[1].get(k) != after[1].get(k)}
        )
        return Outcome(case, "changed", rc, seconds, stderr, ", ".join(changed[:5]))
    if len(lines) != 1:
        return Outcome(case, "not one line", rc, seconds, stderr, f"{len(lines)} lines")
    if case.expect and case.expect not in lines[0]:
        return Outcome(case, "unclear", rc, seconds, stderr, f"{case.expect!r} not named")
    return Outcome(case, "clear", rc, seconds, stderr)


def run_all(cases: list[Case], template: Path, scratch: Path, workers: int = 3) -> list[Outcome]:
    scratch.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda ic: run_case(ic[1], template, scratch / f"c{ic[0]:04d}"), enumerate(cases)))


COLUMNS = ("tried", "clear", "traceback", "hang", "accepted", "late", "changed", "not one line", "unclear")


def table(outcomes: list[Outcome]) -> str:
    kinds = sorted({o.case.kind for o in outcomes}, key=lambda k: KINDS.index(k) if k in KINDS else 99)
    rows = [["kind", *COLUMNS]]
    for kind in kinds + ["all"]:
        mine = [o for o in outcomes if kind in ("all", o.case.kind)]
        rows.append([kind, str(len(mine))] + [str(sum(o.verdict == c for o in mine)) for c in COLUMNS[1:]])
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(w) for cell, w in zip(r, widths, strict=True)) for r in rows)


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ws, run_id, approval_id = build_workspace(root)
        cases = all_cases(run_id, approval_id)
        only = sys.argv[1] if len(sys.argv) > 1 else None
        cases = [c for c in cases if only is None or only in c.kind or only in c.name]
        t0 = time.monotonic()
        outcomes = run_all(cases, ws, root / "cases")
        for o in outcomes:
            if o.verdict != "clear":
                tail = o.stderr.strip().splitlines()[-1][:200] if o.stderr.strip() else ""
                print(f"[{o.verdict}] {o.case.kind}: {o.case.name}: {o.why} | {tail}")
        print(table(outcomes))
        print(f"{len(outcomes)} cases in {time.monotonic() - t0:.0f} s")
