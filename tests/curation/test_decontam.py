"""N-gram decontamination: what leaks is found, reported, and cut or dropped."""

from trainteam.curation.decontam import DecontamConfig, EvalIndex, decontaminate
from trainteam.curation.synthetic import TextWriter

W = TextWriter(seed=11)
PASSAGE = W.text(200)  # ~30 words
ARITH = {"id": "e1", "prompt": "65+88=", "completion": "153"}


def _rec(rid, text):
    return {"id": rid, "text": text, "meta": {}}


def _index(**kw):
    return EvalIndex.build(
        {"qa": [{"id": "p1", "text": PASSAGE}], "addition": [ARITH, {"id": "e2", "prompt": "7=", "completion": ""}]},
        DecontamConfig(**kw),
    )


def test_a_13_word_overlap_leaks_and_12_does_not():
    idx = _index()
    words = PASSAGE.split()
    pre, post = W.text(600), W.text(600)
    thirteen = " ".join(words[5:18]).upper()  # case and punctuation do not hide a leak
    twelve = " ".join(words[5:17])
    out = decontaminate([_rec("a", f"{pre} {thirteen} {post}"), _rec("b", f"{pre} {twelve} {post}")], idx)
    assert out[0].leaked == {"qa/p1"} and out[0].action == "cut"
    assert out[1].leaked == set() and out[1].action == "clean"
    assert out[1].kept[0]["text"] == f"{pre} {twelve} {post}"


def test_cut_removes_the_span_with_margin_and_keeps_long_pieces():
    idx = _index()
    pre, post = W.text(700), W.text(700)
    out = decontaminate([_rec("a", f"{pre} {PASSAGE} {post}")], idx)[0]
    assert [k["id"] for k in out.kept] == ["a#part0", "a#part1"]
    assert all(k["meta"]["cut_from"] == "a" for k in out.kept)
    joined = " ".join(k["text"] for k in out.kept)
    assert PASSAGE[:40] not in joined and len(out.kept[0]["text"]) < len(pre) - 150
    assert decontaminate(out.kept, idx)[0].action == "clean"  # what is kept is clean


def test_short_eval_examples_match_whole_and_tiny_ones_are_listed_unchecked():
    idx = _index()
    assert idx.unchecked == ["addition/e2"]  # one word: any match would be chance
    out = decontaminate([_rec("x", W.text(300) + " we found 65 + 88 = 153 here. " + W.text(300))], idx)[0]
    assert out.leaked == {"addition/e1"}
    clean = decontaminate([_rec("y", W.text(300) + " 65 + 88 = 154 " + W.text(300))], idx)[0]
    assert clean.action == "clean"


def test_drop_mode_and_unusable_pieces_drop_the_record():
    idx = _index(mode="drop")
    out = decontaminate([_rec("a", f"{W.text(700)} {PASSAGE} {W.text(700)}")], idx)[0]
    assert out.action == "dropped" and out.kept == []
    idx = _index()  # cut mode, but too little text around the leak to keep
    out = decontaminate([_rec("b", f"intro {PASSAGE} outro")], idx)[0]
    assert out.action == "dropped" and out.leaked == {"qa/p1"}


def test_configurable_ngram_size():
    idx = _index(ngram=8)
    words = PASSAGE.split()
    out = decontaminate([_rec("a", f"{W.text(600)} {' '.join(words[3:11])} {W.text(600)}")], idx)[0]
    assert out.leaked == {"qa/p1"}
