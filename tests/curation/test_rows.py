"""A user's data, in each file format and column shape, read as the canonical rows; bad rows named by file, row, column.

Every file here is written by the library a user would have used (pandas, pyarrow, datasets, json, csv).
"""

from __future__ import annotations

import csv
import json

import pytest

from trainteam.core.errors import BadInput
from trainteam.curation.rows import canonical_row, iter_rows, read_rows
from trainteam.curation.sources import split_names
from trainteam.curation.splits import HELD_OUT_MAX, Part, held_out, plan_splits

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "today's weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = {"type": "function", "function": {"name": "weather", "arguments": {"city": "Paris"}}}

# shape -> (the user's rows, the canonical rows they become)
SHAPES = {
    "text": (
        [{"id": "a", "text": "The cat sat."}, {"id": "b", "text": "It rained."}],
        [{"text": "The cat sat.", "id": "a"}, {"text": "It rained.", "id": "b"}],
    ),
    "pair": (
        [
            {"id": "a", "prompt": "2+2=", "completion": "4", "system": "Be terse."},
            {"id": "b", "prompt": "3+3=", "completion": "6", "system": "Be terse."},
        ],
        [
            {"prompt": "2+2=", "completion": "4", "system": "Be terse.", "id": "a"},
            {"prompt": "3+3=", "completion": "6", "system": "Be terse.", "id": "b"},
        ],
    ),
    "alpaca": (
        [
            {"instruction": "Translate to French", "input": "cat", "output": "chat"},
            {"instruction": "Say hi", "input": "", "output": "hi"},
        ],
        [{"prompt": "Translate to French\n\ncat", "completion": "chat"}, {"prompt": "Say hi", "completion": "hi"}],
    ),
    "qa": (
        [{"question": "Capital of France?", "answer": "Paris"}, {"question": "2*3?", "answer": "6"}],
        [{"prompt": "Capital of France?", "completion": "Paris"}, {"prompt": "2*3?", "completion": "6"}],
    ),
    "messages": (
        [
            {
                "system": "You help.",
                "tools": TOOLS,
                "messages": [
                    {"role": "user", "content": "Weather in Paris?"},
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {"type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
                        ],
                    },
                    {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
                    {"role": "assistant", "content": "Sunny."},
                ],
            },
            {
                "system": "You help.",
                "tools": TOOLS,
                "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
            },
        ],
        [
            {
                "messages": [
                    {"role": "system", "content": "You help."},
                    {"role": "user", "content": "Weather in Paris?"},
                    {"role": "assistant", "content": "", "tool_calls": [CALL]},
                    {"role": "tool", "content": "sunny", "tool_call_id": "c1"},
                    {"role": "assistant", "content": "Sunny."},
                ],
                "tools": TOOLS,
            },
            {
                "messages": [
                    {"role": "system", "content": "You help."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello!"},
                ],
                "tools": TOOLS,
            },
        ],
    ),
    "sharegpt": (
        [
            {
                "conversations": [
                    {"from": "system", "value": "Be kind."},
                    {"from": "human", "value": "Hi"},
                    {"from": "gpt", "value": "Hello"},
                ]
            },
            {"conversations": [{"from": "human", "value": "Bye"}, {"from": "gpt", "value": "Ciao"}]},
        ],
        [
            {
                "messages": [
                    {"role": "system", "content": "Be kind."},
                    {"role": "user", "content": "Hi"},
                    {"role": "assistant", "content": "Hello"},
                ]
            },
            {"messages": [{"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Ciao"}]},
        ],
    ),
    "preference": (
        [{"prompt": "2+2=", "chosen": "4", "rejected": "5"}, {"prompt": "1+1=", "chosen": "2", "rejected": "3"}],
        [{"prompt": "2+2=", "chosen": "4", "rejected": "5"}, {"prompt": "1+1=", "chosen": "2", "rejected": "3"}],
    ),
    "preference_chat": (  # no prompt column: the turns both sides share are the prompt (TRL's implicit prompt)
        [
            {
                "chosen": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
                "rejected": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Go away."}],
            }
        ]
        * 2,
        [
            {
                "prompt": [{"role": "user", "content": "Hi"}],
                "chosen": [{"role": "assistant", "content": "Hello!"}],
                "rejected": [{"role": "assistant", "content": "Go away."}],
            }
        ]
        * 2,
    ),
}


def _csv(rows, path):
    """A CSV as a spreadsheet user writes one: list cells (turns, tools) as JSON text."""
    with path.open("w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        for r in rows:
            w.writerow({k: json.dumps(v) if isinstance(v, (list, dict)) else v for k, v in r.items()})
    return path


def _pandas_parquet(rows, path):
    import pandas as pd

    pd.DataFrame(rows).to_parquet(path)
    return path


def _arrow_parquet(rows, path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=1)
    return path


def _saved(rows, path):
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_list(rows).save_to_disk(str(path))
    return path


def _saved_dict(rows, path):
    import datasets

    datasets.disable_progress_bars()
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows[:1])}
    ).save_to_disk(str(path))
    return path


def _folder(rows, path):
    (path / "data").mkdir(parents=True)
    _jsonl(rows, path / "data" / "train-00000-of-00001.jsonl")
    _jsonl(rows[:1], path / "data" / "test-00000-of-00001.jsonl")
    return path


def _jsonl(rows, path):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _json(value, path):
    path.write_text(json.dumps(value, indent=1))
    return path


FORMATS = {
    "jsonl": lambda rows, d: _jsonl(rows, d / "train.jsonl"),
    "json list": lambda rows, d: _json(rows, d / "train.json"),
    "json data": lambda rows, d: _json({"data": rows}, d / "train.json"),
    "json lines in .json": lambda rows, d: _jsonl(rows, d / "train.json"),
    "csv": lambda rows, d: _csv(rows, d / "train.csv"),
    "parquet (pandas)": lambda rows, d: _pandas_parquet(rows, d / "train.parquet"),
    "parquet (pyarrow)": lambda rows, d: _arrow_parquet(rows, d / "train.parquet"),
    "saved Dataset": lambda rows, d: _saved(rows, d / "saved"),
    "saved DatasetDict": lambda rows, d: _saved_dict(rows, d / "saved"),
    "folder of files": lambda rows, d: _folder(rows, d / "folder"),
}
# A CSV cell is a string: only turns (messages, conversations) and tools are read back from JSON text.
SKIP = {("csv", "preference_chat")}
CASES = [(f, s) for f in FORMATS for s in SHAPES if (f, s) not in SKIP]


@pytest.mark.parametrize("fmt,shape", CASES, ids=[f"{f}-{s}" for f, s in CASES])
def test_each_format_and_shape_reads_as_canonical_rows(tmp_path, fmt, shape):
    raw, expected = SHAPES[shape]
    source = FORMATS[fmt](raw, tmp_path)
    assert read_rows(source) == expected
    kinds = {r.kind for r in iter_rows(source)}
    assert (
        kinds
        == {
            "text": {"text"},
            "pair": {"pair"},
            "alpaca": {"pair"},
            "qa": {"pair"},
            "messages": {"chat"},
            "sharegpt": {"chat"},
            "preference": {"preference"},
            "preference_chat": {"preference"},
        }[shape]
    )


def test_canonical_rows_are_what_formats_reads(tmp_path):
    from trainteam.curation.formats import example, row_kind

    for shape, (raw, _) in SHAPES.items():
        for row in iter_rows(raw):
            assert row_kind(row.record) == row.kind, shape
            if row.kind in ("pair", "chat"):
                example(row.record)  # a prompt and its reference answer
    # canonical rows read again are unchanged (the prepared train.jsonl is read by training through rows.py)
    rows = [r for raw, _ in SHAPES.values() for r in read_rows(raw)]
    assert read_rows(_jsonl(rows, tmp_path / "canon.jsonl")) == rows


def test_trl_conversational_prompt_completion_is_a_conversation():
    row = canonical_row(
        {
            "prompt": [{"role": "user", "content": "Hi"}],
            "completion": [{"role": "assistant", "content": "Hello"}],
            "label": 1,
        },
        "x.jsonl:1",
    )
    assert row.kind == "chat"
    assert row.record == {
        "messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}],
        "label": 1,
    }


def test_column_mapping_renames_the_users_columns(tmp_path):
    rows = [{"q": f"{i}+1=", "a": str(i + 1), "source": "mine"} for i in range(3)]
    path = _arrow_parquet(rows, tmp_path / "mine.parquet")
    mapping = {"prompt": "q", "completion": "a"}
    assert read_rows(path, columns=mapping) == [
        {"prompt": f"{i}+1=", "completion": str(i + 1), "source": "mine"} for i in range(3)
    ]
    with pytest.raises(
        BadInput, match=r"mine\.parquet: row 0: no column to read a row from.*found \['a', 'q', 'source'\]"
    ):
        read_rows(path)
    # a chat column of another name
    chats = [{"dialog": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}]
    assert read_rows(chats, columns={"messages": "dialog"}) == [{"messages": chats[0]["dialog"]}]
    with pytest.raises(BadInput, match=r"columns: 'answer' is not a canonical column"):
        read_rows(chats, columns={"answer": "dialog"})


def test_limit_reads_a_sample_without_reading_the_rest(tmp_path):
    path = tmp_path / "big.jsonl"
    path.write_text('{"text": "one"}\n{"text": "two"}\n{not json\n')
    assert read_rows(path, limit=2) == [{"text": "one"}, {"text": "two"}]
    with pytest.raises(BadInput, match=r"big\.jsonl:3: invalid JSON"):
        read_rows(path)


# -- errors: one line naming the file, the row and the column ---------------------------------------


def test_jsonl_errors_name_line_and_column(tmp_path):
    good = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]}
    cases = {
        "turn without content": (
            {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant"}]},
            r"chat\.jsonl:3: column 'messages': turn 2 has no 'content'$",
        ),
        "unknown role": (
            {"messages": [{"role": "wizard", "content": "Hi"}]},
            r"chat\.jsonl:3: column 'messages': turn 1: unknown role 'wizard'",
        ),
        "turns not a list": ({"messages": "hello"}, r"chat\.jsonl:3: column 'messages': a string that is not JSON"),
        "a turn not an object": (
            {"conversations": ["hi"]},
            r"chat\.jsonl:3: column 'conversations': turn 1 is str, not an object",
        ),
        "tool call without a name": (
            {"messages": [{"role": "assistant", "content": "", "tool_calls": [{"arguments": "{}"}]}]},
            r"chat\.jsonl:3: column 'messages': turn 1: a tool call without a function name",
        ),
        "tools not a list": ({**good, "tools": {"name": "x"}}, r"chat\.jsonl:3: column 'tools': expected a list"),
        "second system": (
            {"system": "A", "messages": [{"role": "system", "content": "B"}, *good["messages"]]},
            r"chat\.jsonl:3: column 'system': the conversation already starts with another system turn",
        ),
        "completion a number": (
            {"prompt": "1+1=", "completion": 2},
            r"chat\.jsonl:3: column 'completion': not a string \(int\)",
        ),
        "prompt without completion": ({"prompt": "1+1="}, r"chat\.jsonl:3: column 'completion' is missing"),
        "chosen without rejected": ({"prompt": "p", "chosen": "a"}, r"chat\.jsonl:3: column 'rejected' is missing"),
        "mixed preference": (
            {"prompt": "p", "chosen": "a", "rejected": [{"role": "assistant", "content": "b"}]},
            r"chat\.jsonl:3: column 'rejected': chosen and rejected must both be strings",
        ),
        "preference without prompt": ({"chosen": "a", "rejected": "b"}, r"chat\.jsonl:3: column 'prompt' is missing"),
        "alpaca instruction a number": (
            {"instruction": 5, "output": "y"},
            r"chat\.jsonl:3: column 'instruction': not a string \(int\)",
        ),
        "nothing readable": ({"title": "x"}, r"chat\.jsonl:3: no column to read a row from.*found \['title'\]"),
    }
    for name, (bad, pattern) in cases.items():
        path = tmp_path / "chat.jsonl"
        path.write_text(json.dumps(good) + "\n\n" + json.dumps(bad) + "\n")  # line 2 is blank
        with pytest.raises(BadInput, match=pattern) as err:
            read_rows(path)
        assert "\n" not in str(err.value), name


def test_csv_errors_name_the_line_the_row_starts_on(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text('prompt,completion\n"a prompt\nover two lines",ok\n"1+1=",\n')
    assert read_rows(path) == [
        {"prompt": "a prompt\nover two lines", "completion": "ok"},
        {"prompt": "1+1=", "completion": ""},
    ]
    path.write_text('prompt,completion\n"a prompt\nover two lines",ok\n"1+1=",2,3\n')
    with pytest.raises(BadInput, match=r"t\.csv:4: 3 fields, the header has 2"):
        read_rows(path)
    path.write_text('prompt,completion,messages\nx,y,\n,,"[{""role"": ""user""}]"\n')
    with pytest.raises(BadInput, match=r"t\.csv:3: column 'messages': turn 1 has no 'content'"):
        read_rows(path)
    path.write_bytes(b"text\nok\n\xff\xfe\n")
    with pytest.raises(BadInput, match=r"t\.csv:3: not UTF-8"):
        read_rows(path)


def test_parquet_json_and_saved_dataset_errors_name_the_row_index(tmp_path):
    rows = [{"prompt": "a", "completion": "1"}, {"prompt": "b", "completion": "2"}, {"prompt": "c", "completion": None}]
    with pytest.raises(BadInput, match=r"p\.parquet: row 2: column 'completion' is missing"):
        read_rows(_pandas_parquet(rows, tmp_path / "p.parquet"))
    with pytest.raises(BadInput, match=r"j\.json: row 2: column 'completion' is missing"):
        read_rows(_json(rows, tmp_path / "j.json"))
    with pytest.raises(BadInput, match=r"j\.json: train: row 2: column 'completion' is missing"):
        read_rows(_json({"train": rows, "test": rows[:1]}, tmp_path / "j.json"))
    with pytest.raises(BadInput, match=r"saved/train: row 2: column 'completion' is missing"):
        read_rows(_saved_dict(rows, tmp_path / "saved"))
    chats = [
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]},
        {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": None}]},
    ]
    with pytest.raises(BadInput, match=r"c\.parquet: row 1: column 'messages': turn 2 has no 'content'"):
        read_rows(_arrow_parquet(chats, tmp_path / "c.parquet"))
    (tmp_path / "broken.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(BadInput, match=r"broken\.parquet: not a readable Parquet file"):
        read_rows(tmp_path / "broken.parquet")
    (tmp_path / "broken.json").write_text('[{"text": "a"},\n {"text": }]')
    with pytest.raises(BadInput, match=r"broken\.json:2: invalid JSON"):
        read_rows(tmp_path / "broken.json")


def test_mapped_columns_are_named_as_the_user_wrote_them(tmp_path):
    mapping = {"prompt": "q", "completion": "a"}
    path = _jsonl([{"q": "1+1=", "a": "2"}, {"q": "2+2=", "a": 4}], tmp_path / "m.jsonl")
    with pytest.raises(BadInput, match=r"m\.jsonl:2: column 'a': not a string \(int\)"):
        read_rows(path, columns=mapping)
    path = _jsonl([{"q": "1+1=", "a": "2"}, {"x": "?"}], tmp_path / "m.jsonl")
    with pytest.raises(BadInput, match=r"m\.jsonl:2: column 'q' \(mapped to prompt\) is missing; found \['x'\]"):
        read_rows(path, columns=mapping)


# -- splits and held-out rows ---------------------------------------------------------------------


def test_splits_of_a_folder_a_saved_dict_and_a_json_object(tmp_path):
    pair = SHAPES["pair"][0]
    folder = _folder(pair, tmp_path / "f")
    assert split_names(folder) == ["test", "train"]
    assert len(read_rows(folder)) == 2 and len(read_rows(folder, split="test")) == 1
    plan = plan_splits(folder)
    assert plan.train == Part(folder, "train") and plan.eval == Part(folder, "test")
    saved = _saved_dict(pair, tmp_path / "s")
    assert plan_splits(saved).eval == Part(saved, "test")
    assert read_rows(saved, split="test") == [SHAPES["pair"][1][0]]
    # dev/val/valid/eval are the validation split, preferred to test for held-out rows
    dev = tmp_path / "d"
    dev.mkdir()
    for name in ("train.jsonl", "dev.csv", "test.jsonl"):
        (_jsonl if name.endswith("jsonl") else _csv)(pair, dev / name)
    assert plan_splits(dev).eval == Part(dev, "validation")
    assert read_rows(dev, split="dev") == read_rows(dev / "dev.csv")
    one = _jsonl(pair, tmp_path / "one.jsonl")
    assert plan_splits(one) == plan_splits(one, None) and plan_splits(one).eval is None
    assert plan_splits(one, dev).eval == Part(dev, "validation")
    with pytest.raises(BadInput, match=r"no split 'valdation' \(splits: test, train\)"):
        read_rows(folder, split="valdation")
    with pytest.raises(BadInput, match=r"the held-out rows would be the training split"):
        plan_splits(folder, eval_split="train")
    (folder / "notes.jsonl").write_text(json.dumps({"text": "x"}) + "\n")
    with pytest.raises(BadInput, match=r"notes\.jsonl names no split while other files do"):
        read_rows(folder)


def test_held_out_rows_are_seeded_and_bounded():
    assert held_out(100, 0.1, 0) == held_out(100, 0.1, 0)
    assert held_out(100, 0.1, 0) != held_out(100, 0.1, 1)
    assert len(held_out(100, 0.1, 0)) == 10
    assert len(held_out(3, 0.1, 0)) == 1  # at least one row
    assert len(held_out(2, 0.9, 0)) == 1  # never every row
    assert len(held_out(100_000, 0.1, 0)) == HELD_OUT_MAX
    with pytest.raises(BadInput, match="1 row: too few"):
        held_out(1, 0.1, 0)


def test_training_api_reads_parquet_and_saved_folders(tmp_path):
    from trainteam.trainers.methods.method_data import load_data

    rows = [{"prompt": "2+2=", "completion": "4"}, {"prompt": "3+3=", "completion": "6", "system": "terse"}]
    ds = load_data(_jsonl(rows, tmp_path / "t.jsonl"), "sft")
    assert ds.column_names == ["prompt", "completion", "system"] and ds[1]["system"] == "terse"  # every row's columns
    ds = load_data(_pandas_parquet(SHAPES["qa"][0], tmp_path / "t.parquet"), "sft")
    assert list(ds) == SHAPES["qa"][1]
    ds = load_data(_saved_dict(SHAPES["messages"][0], tmp_path / "chat"), "sft")
    # each turn keeps its own keys (no None for another turn's tool_calls: a template tests `is defined`)
    assert len(ds) == 2 and ds[1]["messages"][0] == {"role": "system", "content": "You help."}
    (tmp_path / "t.csv").write_text("prompt,answer_text\nx,y\n")
    with pytest.raises(BadInput, match=r"t\.csv:2: column 'completion' is missing"):
        load_data(tmp_path / "t.csv", "sft")
