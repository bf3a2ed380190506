"""A user's own data files through the real CLI: Parquet and a saved ``datasets`` folder train; a bad
column is one line, exit 2, before any run exists. Then the data checks of preflight, shape by shape.

The workflow runs use the project's tiny from-scratch model (a few steps): what is tested is how the
data gets in, not what the model learns.
"""

from __future__ import annotations

import json
import random

import pytest
import yaml
from spine_helpers import DATA, TINY_TASK, cli

from trainteam.contract.train_task import parse_task
from trainteam.core.errors import BadInput
from trainteam.curation.splits import held_out
from trainteam.workflows.task.preflight import preflight


def _qa_rows(n: int, seed: int = 0) -> list[dict]:
    r = random.Random(seed)
    rows = []
    for i in range(n):
        a, b = r.randint(0, 20), r.randint(0, 20)
        rows.append({"id": f"r{i}", "q": f"{a}+{b}=", "a": str(a + b)})
    return rows


def _parquet(rows, path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def _saved_dict(splits: dict[str, list[dict]], path):
    import datasets

    datasets.disable_progress_bars()
    datasets.DatasetDict({k: datasets.Dataset.from_list(v) for k, v in splits.items()}).save_to_disk(str(path))
    return path


def _task(tmp_path, data: dict, **changes) -> str:
    path = tmp_path / "task.yaml"
    path.write_text(yaml.safe_dump({**TINY_TASK, "data": data, **changes}))
    return str(path)


def _prepare_output(ws, run_id: str) -> dict:
    from trainteam.workflows.engine.store import RunStore
    from trainteam.workspace import Workspace

    attempts = RunStore(Workspace.open(ws).engine).attempts(run_id)
    return next(a["output"] for a in attempts if a["step"] == "prepare_corpus" and a["status"] == "completed")


def _jsonl(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_parquet_with_a_column_mapping_trains_and_holds_out_a_seeded_share(tmp_path, ws):
    rows = _qa_rows(120)
    task = _task(
        tmp_path,
        {"path": str(_parquet(rows, tmp_path / "mine.parquet")), "columns": {"prompt": "q", "completion": "a"}},
    )
    proc = cli(ws, "execute-workflow", "train_model", "--task", task, "--yes", "--run-id", "pq-run-0001", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = _prepare_output(ws, "pq-run-0001")
    train, ev = _jsonl(ws.joinpath(out["artifacts"]["train"])), _jsonl(ws.joinpath(out["artifacts"]["eval"]))
    held = held_out(120, 0.1, 0)
    assert len(ev) == 12 and {r["id"] for r in ev} == {f"r{i}" for i in held}
    assert [r["id"] for r in train] == [f"r{i}" for i in range(120) if i not in held]  # order kept
    assert train[0] == {"prompt": rows[0]["q"], "completion": rows[0]["a"], "id": "r0"}  # canonical rows
    assert out["details"]["eval_from"] == {"eval": "held out 0.1 (seed 0)"}
    assert "held out 0.1 (seed 0)" in proc.stdout + proc.stderr  # what the step did, in the run's output
    runs = json.loads(cli(ws, "runs", "list", "--json", check=True).stdout)
    assert [(r["run_id"], r["status"]) for r in runs] == [("pq-run-0001", "completed")]


def test_saved_datasetdict_gives_its_train_and_test_splits(tmp_path, ws):
    rows = [{"prompt": r["q"], "completion": r["a"], "id": r["id"]} for r in _qa_rows(30)]
    saved = _saved_dict({"train": rows[:24], "test": rows[24:]}, tmp_path / "saved")
    task = _task(tmp_path, {"path": str(saved)}, workflow="prep_only")
    proc = cli(ws, "execute-workflow", str(DATA / "prep_only.yaml"), "--task", task, "-q", "--run-id", "dd-run-0001")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = _prepare_output(ws, "dd-run-0001")
    assert _jsonl(ws.joinpath(out["artifacts"]["train"])) == rows[:24]
    assert _jsonl(ws.joinpath(out["artifacts"]["eval"])) == rows[24:]
    assert out["details"]["eval_from"] == {"eval": "split test"}
    # the same inputs read the same way are one dataset version: a second run reuses the folder
    proc = cli(ws, "execute-workflow", str(DATA / "prep_only.yaml"), "--task", task, "-q", "--run-id", "dd-run-0002")
    assert proc.returncode == 0 and _prepare_output(ws, "dd-run-0002")["artifacts"] == out["artifacts"]


def test_a_bad_column_is_one_line_exit_2_and_no_run(tmp_path, ws):
    rows = [{"prompt": r["q"], "completion": r["a"]} for r in _qa_rows(20)]
    rows[7]["completion"] = None
    task = _task(tmp_path, {"path": str(_parquet(rows, tmp_path / "bad.parquet"))})
    proc = cli(ws, "execute-workflow", "train_model", "--task", task)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert f"{task}: data.path: {tmp_path / 'bad.parquet'}: row 7: column 'completion' is missing" in lines[0]
    assert json.loads(cli(ws, "runs", "list", "--json", check=True).stdout) == []


# -- preflight: every row of every stage's data, before a run exists -------------------------------------


def _check(tmp_path, data: dict, **changes):
    body = {**TINY_TASK, "data": data, **changes}
    task = parse_task(body, "task.yaml", tmp_path)
    preflight(task, "task.yaml")
    return task


CHAT = [
    {"messages": [{"role": "user", "content": f"{i}+1?"}, {"role": "assistant", "content": str(i + 1)}]}
    for i in range(20)
]


def test_preflight_takes_chat_preference_and_mapped_rows_where_the_method_reads_them(tmp_path):
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_list(CHAT).save_to_disk(str(tmp_path / "chat"))
    sft = {
        "stages": ["pretrain", "sft"],
        "training": {s: {"max_steps": 2, "seq_len": 32} for s in ("pretrain", "sft")},
        "gates": {},
    }
    _check(tmp_path, {"path": "chat"}, **sft)  # a relative folder, held-out share of chat rows
    pref = [{"prompt": f"{i}+1?", "chosen": str(i + 1), "rejected": str(i)} for i in range(20)]
    (tmp_path / "pref.jsonl").write_text("".join(json.dumps(r) + "\n" for r in pref))
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CHAT[:4]))
    with pytest.raises(
        BadInput,
        match=r"^task\.yaml: data\.path: .*pref\.jsonl:1: pretrain trains on text, pair, "
        r"chat rows; this row is preference$",
    ):
        _check(tmp_path, {"path": "pref.jsonl", "eval_path": "eval.jsonl"}, **sft)
    curriculum = [
        {"name": "pretrain", "training": {"max_steps": 2, "seq_len": 32}},
        {
            "name": "sft",
            "kind": "post_train",
            "training": {"max_steps": 2, "seq_len": 32},
            "data": {"path": "pref.jsonl", "eval_path": "eval.jsonl"},
        },
    ]
    body = {k: v for k, v in TINY_TASK.items() if k not in ("stages", "training", "gates")}
    with pytest.raises(
        BadInput,
        match=r"^task\.yaml: curriculum\[1\]\.data\.path: .*pref\.jsonl:1: sft trains on "
        r"pair, chat, text rows; this row is preference$",
    ):
        preflight(parse_task({**body, "curriculum": curriculum}, "task.yaml", tmp_path), "task.yaml")


def test_preflight_refuses_conversations_without_a_reply_to_learn_or_check(tmp_path):
    rows = CHAT[:5] + [{"messages": [{"role": "user", "content": "and then?"}]}] + CHAT[5:]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in CHAT[:4]))
    # pretraining reads it as text, so the row is fine there...
    _check(tmp_path, {"path": "chat.jsonl", "eval_path": "eval.jsonl"})
    sft = {
        "stages": ["pretrain", "sft"],
        "training": {s: {"max_steps": 2, "seq_len": 32} for s in ("pretrain", "sft")},
        "gates": {},
    }
    with pytest.raises(
        BadInput,
        match=r"chat\.jsonl:6: column 'messages': the conversation ends with a user turn, "
        r"not an assistant reply$",
    ):
        _check(tmp_path, {"path": "chat.jsonl", "eval_path": "eval.jsonl"}, **sft)
    # ...but never as a held-out row: exact match checks a reference answer
    with pytest.raises(
        BadInput,
        match=r"task\.yaml: data\.eval_path: .*chat\.jsonl:6: column 'messages': the "
        r"conversation ends with a user turn",
    ):
        _check(tmp_path, {"path": "eval.jsonl", "eval_path": "chat.jsonl"})


def test_preflight_checks_the_rows_it_will_hold_out(tmp_path):
    texts = [{"text": f"story number {i}"} for i in range(30)]
    (tmp_path / "stories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in texts))
    first_held = min(held_out(30, 0.1, 0))
    with pytest.raises(
        BadInput,
        match=rf"data\.path: .*stories\.jsonl:{first_held + 1}: held out for evaluation, a "
        r"held-out row needs a prompt and its reference answer.*give data\.eval_path$",
    ):
        _check(tmp_path, {"path": "stories.jsonl"})
    (tmp_path / "one.jsonl").write_text(json.dumps({"prompt": "1+1=", "completion": "2"}) + "\n")
    with pytest.raises(
        BadInput, match=r"data\.path: .*one\.jsonl: 1 row: too few to hold any out.*give data\.eval_path"
    ):
        _check(tmp_path, {"path": "one.jsonl"})
    (tmp_path / "empty.parquet").write_bytes(b"")
    with pytest.raises(BadInput, match=r"data\.path: .*empty\.parquet: not a readable Parquet file"):
        _check(tmp_path, {"path": "empty.parquet"})


def test_data_fields_are_checked_when_the_task_is_read(tmp_path):
    (tmp_path / "t.jsonl").write_text(json.dumps({"q": "1", "a": "2"}) + "\n")
    cases = {
        "data.columns": ({"path": "t.jsonl", "columns": {"question": "q"}}, "'question' is not a canonical column"),
        "data.columns twice": ({"path": "t.jsonl", "columns": {"prompt": "q", "completion": "q"}}, "mapped twice"),
        "demo with columns": ({"demo": "addition", "columns": {"prompt": "q"}}, "data.columns: only for data.path"),
        "fraction with eval_path": (
            {"path": "t.jsonl", "eval_path": "t.jsonl", "eval_fraction": 0.2},
            "data.eval_fraction",
        ),
        "fraction of 1": ({"path": "t.jsonl", "eval_fraction": 1.0}, "data.eval_fraction"),
    }
    for name, (data, needle) in cases.items():
        with pytest.raises(BadInput, match="task.yaml: ") as err:
            parse_task({**TINY_TASK, "data": data}, "task.yaml", tmp_path)
        assert needle in str(err.value), (name, str(err.value))
