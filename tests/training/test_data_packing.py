"""Pretraining windows come from the data engine's packer: one EOS closes each record, never two."""

from __future__ import annotations

import pytest
from datasets import Dataset

from trainteam.trainers.methods.pretrain import packed_windows, record_text


@pytest.mark.parametrize("kind", ["prompt_completion", "text"])
def test_windows_close_each_record_once(tok, arith, kind):
    recs = (
        arith[0][:40]
        if kind == "prompt_completion"
        else [{"text": f"{i}+{i}={2 * i}"} for i in range(40)] + [{"text": ""}]
    )
    eos = tok.eos_token_id
    ds = packed_windows(tok, Dataset.from_list(recs), 16)
    assert all(len(w) == 16 for w in ds["input_ids"]) and ds["labels"] == ds["input_ids"]
    flat = sum(ds["input_ids"], [])
    expected = []
    for r in recs:
        ids = tok(record_text(tok, r), add_special_tokens=False)["input_ids"]
        if kind == "prompt_completion":  # a completion already ends in EOS: not closed a second time
            assert ids[-1] == eos
        expected += (ids[:-1] if ids and ids[-1] == eos else ids) + [eos]
    assert expected.count(eos) == len(recs)
    assert flat == expected[: len(flat)] and len(expected) - len(flat) < 16  # only the partial tail dropped
