"""The one data reader (curation/sources.py ``iter_items``, under ``iter_rows`` and curation) refuses a source with
no usable row and a row over the bound, naming the file and the row; curation never writes a version of 0 rows,
and leaves no folder behind when it refuses."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from trainteam.core.errors import BadInput
from trainteam.curation.jsonl import SkipCounter
from trainteam.curation.pipeline import CurationConfig, NothingKept, curate
from trainteam.curation.rows import read_rows
from trainteam.curation.sources import MAX_ROW_BYTES, iter_items

ROW = '{"prompt": "Name a colour.", "completion": "Blue."}\n'


@pytest.mark.parametrize("body", ["", "\n\n   \n\t\n", "\ufeff\n"])
def test_a_file_with_no_row_is_refused(tmp_path, body):
    path = tmp_path / "train.jsonl"
    path.write_text(body)
    with pytest.raises(BadInput, match=r"train\.jsonl: no rows \(the file is empty, or only blank lines\)$"):
        read_rows(path)


@pytest.mark.parametrize("name,body", [("t.csv", "prompt,completion\n"), ("t.txt", "\n \n"), ("t.json", "[]"),
                                       ("t.json", '{"data": []}')])
def test_every_kind_of_file_with_no_row_is_refused(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(body)
    with pytest.raises(BadInput, match=rf"{name}: no rows"):
        list(iter_items(path))


def test_a_folder_whose_files_are_empty_and_an_empty_list_are_refused(tmp_path):
    (tmp_path / "a.jsonl").write_text("")
    (tmp_path / "b.jsonl").write_text("\n")
    with pytest.raises(BadInput, match=r"no rows in its files"):
        read_rows(tmp_path)
    with pytest.raises(BadInput, match=r"^source: no rows$"):
        read_rows([])


def test_only_malformed_lines_skipped_is_no_usable_row(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("{not json\n[1, 2]\n")
    skipped = SkipCounter()
    with pytest.raises(BadInput, match=r"train\.jsonl: no usable row \(2 malformed skipped; the first: .*jsonl:1"):
        list(iter_items(path, skip_bad=True, skipped=skipped))


def test_a_sample_of_a_good_file_reads_as_before(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("\n" + ROW * 3 + "\n")
    assert len(read_rows(path)) == 3 and len(read_rows(path, limit=1)) == 1


def _long_line(n: int) -> str:
    return json.dumps({"prompt": "x" * n, "completion": "y"}) + "\n"


@pytest.mark.parametrize("kind", ["jsonl", "csv", "txt", "json", "parquet"])
def test_a_row_over_the_bound_is_refused_naming_its_file_and_row(tmp_path, kind):
    bound, big = 4096, 5000
    path = tmp_path / f"train.{kind}"
    if kind == "jsonl":
        path.write_text(ROW + _long_line(big))
        where = r"train\.jsonl:2"
    elif kind == "csv":
        path.write_text("prompt,completion\nhi,there\n" + "x" * big + ",y\n")
        where = r"train\.csv:3"
    elif kind == "txt":  # a paragraph of short lines, longer in all than the bound
        path.write_text("one short paragraph\n\n" + ("a line of words\n" * 400))
        where = r"train\.txt:3"
    elif kind == "json":
        path.write_text(json.dumps([json.loads(ROW), {"prompt": "x" * big, "completion": "y"}]))
        where = r"train\.json: row 1"
    else:
        pq.write_table(pa.table({"prompt": ["hi", "x" * big], "completion": ["a", "b"]}), path)
        where = r"train\.parquet: row 1"
    with pytest.raises(BadInput, match=rf"{where}: a row of more than 4,096 bytes \(the bound on one row; split it, "
                                       r"or raise data\.max_row_bytes in the task\)$"):
        list(iter_items(path, max_row_bytes=bound))
    assert list(iter_items(path, max_row_bytes=None))  # without the bound (the product's own files) it reads


def test_the_default_bound_refuses_a_50_mb_line_without_reading_it_whole(tmp_path):
    path = tmp_path / "train.jsonl"
    with path.open("w") as fh:
        fh.write('{"prompt": "')
        fh.write("x" * (50 << 20))
        fh.write('", "completion": "y"}\n')
    import tracemalloc

    tracemalloc.start()
    with pytest.raises(BadInput, match=r"train\.jsonl:1: a row of more than 1,048,576 bytes"):
        read_rows(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 8 * MAX_ROW_BYTES  # at most the bound (and a little) was read, not 50 MB


def test_a_row_at_the_bound_is_kept(tmp_path):
    line = _long_line(0)
    line = _long_line(4096 - len(line))  # 4,096 bytes with its newline: 4,095 of row
    path = tmp_path / "train.jsonl"
    path.write_text(line + line.replace('"y"', '"z"'))
    assert len(list(iter_items(path, max_row_bytes=4095))) == 2
    with pytest.raises(BadInput, match=r"train\.jsonl:1: a row of more than 4,094 bytes"):
        list(iter_items(path, max_row_bytes=4094))


def test_curation_refuses_a_version_of_0_rows_and_writes_nothing(tmp_path):
    rows = [{"id": f"r{i}", "text": f"too short {i}"} for i in range(5)]  # the text quality filter removes them all
    out = tmp_path / "datasets" / "v1"
    with pytest.raises(NothingKept, match=r"^source: no row is left of 5 after curation \(quality\.min_words 5\)$"):
        curate(rows, None, CurationConfig(), out_dir=out, progress=False)
    assert not (tmp_path / "datasets").exists()
    (tmp_path / "kept").mkdir()  # a folder that was there stays, empty as it was
    with pytest.raises(NothingKept):
        curate(rows, None, CurationConfig(), out_dir=tmp_path / "kept", progress=False)
    assert list((tmp_path / "kept").iterdir()) == []


@pytest.mark.parametrize("device", ["/dev/null", "/dev/zero"])
def test_curation_of_a_device_is_refused_before_it_is_read(device):
    with pytest.raises(BadInput, match=rf"^{device}: not a regular file or a folder"):
        curate(device, None, CurationConfig(), progress=False)
