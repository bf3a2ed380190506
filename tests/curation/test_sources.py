"""Every source kind streams {id, text, meta}; malformed input names file:line or is counted."""

import json

import pytest

from trainteam.core.errors import BadInput
from trainteam.curation.sources import SkipCounter, iter_records

ROWS = [{"id": "a", "text": "first doc", "lang": "en"}, {"id": "b", "text": "second doc"}, {"text": "third"}]


def _texts(recs):
    return [r["text"] for r in recs]


def test_list_of_records_and_strings():
    recs = list(iter_records(ROWS))
    assert _texts(recs) == ["first doc", "second doc", "third"]
    assert recs[0] == {"id": "a", "text": "first doc", "meta": {"lang": "en"}}
    assert recs[2]["id"] == "source:2"
    assert _texts(iter_records(["x", "y"])) == ["x", "y"]


def test_jsonl_txt_parquet_and_folder(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (tmp_path / "b.txt").write_text("para one\nstill one\n\n\npara two\n")
    pq.write_table(pa.Table.from_pylist(ROWS), tmp_path / "c.parquet", row_group_size=1)
    assert _texts(iter_records(tmp_path / "a.jsonl")) == _texts(ROWS)
    assert _texts(iter_records(tmp_path / "b.txt")) == ["para one\nstill one", "para two"]
    assert _texts(iter_records(tmp_path / "b.txt", txt_mode="line")) == ["para one", "still one", "para two"]
    assert [r["id"] for r in iter_records(tmp_path / "b.txt")] == ["b:1", "b:5"]
    assert _texts(iter_records(tmp_path / "c.parquet", batch_size=2)) == _texts(ROWS)
    (tmp_path / "d.csv").write_text('id,text\nx,"a CSV row\nover two lines"\ny,next\n')
    assert [(r["id"], r["text"]) for r in iter_records(tmp_path / "d.csv")] == [
        ("x", "a CSV row\nover two lines"),
        ("y", "next"),
    ]
    (tmp_path / "e.json").write_text(json.dumps({"data": ROWS}))
    assert _texts(iter_records(tmp_path / "e.json")) == _texts(ROWS)
    # a folder: its files in name order
    assert len(list(iter_records(tmp_path))) == 3 + 2 + 3 + 2 + 3


def test_saved_hf_dataset_and_streaming_mode(tmp_path):
    import datasets

    datasets.disable_progress_bars()
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    assert _texts(iter_records(tmp_path / "saved")) == _texts(ROWS)
    datasets.DatasetDict(
        {"train": datasets.Dataset.from_list(ROWS[:2]), "test": datasets.Dataset.from_list(ROWS[2:])}
    ).save_to_disk(str(tmp_path / "dd"))
    assert _texts(iter_records(tmp_path / "dd")) == _texts(ROWS[:2])  # a DatasetDict gives its train split
    assert _texts(iter_records(tmp_path / "dd", split="test")) == _texts(ROWS[2:])
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "part.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    streamed = list(iter_records(tmp_path / "s", streaming=True))
    assert _texts(streamed) == _texts(ROWS)
    it = datasets.Dataset.from_list(ROWS).to_iterable_dataset()
    assert _texts(iter_records(it)) == _texts(ROWS)


def test_malformed_lines_stop_with_file_line_or_are_counted(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(
        json.dumps(ROWS[0]) + "\n{oops\n" + json.dumps({"title": "no text"}) + "\n" + json.dumps(ROWS[1]) + "\n"
    )
    with pytest.raises(BadInput, match=r"bad\.jsonl:2: invalid JSON"):
        list(iter_records(p))
    p2 = tmp_path / "notext.jsonl"
    p2.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"text": 5}) + "\n")
    with pytest.raises(BadInput, match=r"notext\.jsonl:2: field 'text' is not a string"):
        list(iter_records(p2))
    skipped = SkipCounter()
    recs = list(iter_records(p, skip_bad=True, skipped=skipped))
    assert [r["id"] for r in recs] == ["a", "b"]
    assert skipped.count == 2
    assert "bad.jsonl:2" in skipped.examples[0] and "bad.jsonl:3" in skipped.examples[1]


def test_unknown_inputs_are_clear_errors(tmp_path):
    (tmp_path / "x.xlsx").write_text("a,b\n")
    with pytest.raises(BadInput, match=r"x\.xlsx: unknown source type"):
        list(iter_records(tmp_path / "x.xlsx"))
    with pytest.raises(BadInput, match="no such file"):
        list(iter_records(tmp_path / "missing.jsonl"))
    with pytest.raises(BadInput, match=r"source\[1\]: expected an object"):
        list(iter_records([{"text": "ok"}, 42]))
