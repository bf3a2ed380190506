"""Exact and near-duplicate detection: thresholds, verification, clusters, survivors."""

import random

import numpy as np

from trainteam.curation.dedup import ExactDeduper, NearDupConfig, collision_probability, lsh_params, near_duplicates
from trainteam.curation.text import content_hash, ngram_hashes, word_hashes


def _shingles(words, n=5):
    return {tuple(words[i : i + n]) for i in range(len(words) - n + 1)}


def _jaccard(a, b):
    sa, sb = _shingles(a.split()), _shingles(b.split())
    return len(sa & sb) / len(sa | sb)


def _doc(rng, n=200):
    return [f"w{rng.randrange(10**6)}" for _ in range(n)]


def _replace_tail(words, k, rng):
    """Replace the last k words: a Jaccard that falls step by step as k grows."""
    return words[: len(words) - k] + [f"z{rng.randrange(10**6)}" for _ in range(k)]


def _replace_head(words, k, rng):
    return [f"y{rng.randrange(10**6)}" for _ in range(k)] + words[k:]


def _straddle(base, rng, edit=_replace_tail):
    """Two edits of ``base``: the last one still >= 0.8 Jaccard, and the first one below."""
    prev = None
    for k in range(1, 100):
        cand = edit(base, k, rng)
        j = _jaccard(" ".join(base), " ".join(cand))
        if j < 0.8:
            return prev, cand
        prev = cand
    raise AssertionError("unreachable")


def test_exact_dedup_ignores_case_punctuation_and_spacing():
    assert content_hash("Hello,  World!") == content_hash("hello world")
    assert content_hash("hello world") != content_hash("hello worlds")
    d = ExactDeduper()
    verdicts = d.batch(["a", "b", "c", "d"], ["The cat sat.", "the CAT   sat", "a dog", "The cat sat!"])
    assert verdicts == [None, "a", None, "a"]
    assert d.dropped == 2


def test_lsh_params_follow_the_weighted_error_rule():
    # Equal weights reproduce datasketch's choice for 128 permutations at 0.8.
    assert lsh_params(0.8, 128, 0.5, 0.5) == (9, 13)
    b, r = lsh_params(0.8, 128, 0.05, 0.95)
    assert b * r <= 128
    # Weighting misses more buys recall at the threshold.
    assert collision_probability(0.8, b, r) > collision_probability(0.8, 9, 13) + 0.3


def test_pairs_just_above_and_just_below_threshold():
    rng = random.Random(1)
    base = _doc(rng)
    above, below = _straddle(base, rng)
    ja, jb = _jaccard(" ".join(base), " ".join(above)), _jaccard(" ".join(base), " ".join(below))
    assert 0.8 <= ja < 0.82 and 0.78 < jb < 0.8
    texts = [" ".join(base), " ".join(above), " ".join(_doc(rng)), " ".join(below)]
    # Many short bands: every one of these pairs becomes a candidate, so the exact
    # Jaccard check alone decides -- the below-threshold pairs must be rejected.
    res = near_duplicates(texts, NearDupConfig(threshold=0.8, bands=32, rows=4))
    assert res.candidates >= 3
    found = {(i, j): s for i, j, s in res.pairs}
    assert set(found) == {(0, 1)}
    assert abs(found[(0, 1)] - ja) < 1e-9  # the reported similarity is the exact one
    assert res.survivor_of == {1: 0}


def test_clusters_are_transitive_and_keep_the_earliest():
    rng = random.Random(2)
    a = _doc(rng)
    b, _ = _straddle(a, rng)  # just similar enough to a
    c, _ = _straddle(b, rng, _replace_head)  # just similar enough to b, so not to a
    assert _jaccard(" ".join(a), " ".join(c)) < 0.8
    other = _doc(rng)
    texts = [" ".join(other), " ".join(c), " ".join(a), " ".join(b)]
    res = near_duplicates(texts, NearDupConfig(threshold=0.8, bands=32, rows=4))
    assert res.survivor_of == {2: 1, 3: 1}  # one cluster {c, a, b}; c came first
    assert 0 not in res.duplicates


def test_default_config_finds_injected_near_dups_at_scale():
    from trainteam.curation.synthetic import TextCorpusConfig, iter_text_corpus

    recs = list(iter_text_corpus(TextCorpusConfig(n_docs=3000, near_dup_fraction=0.1, seed=5)))
    res = near_duplicates([r["text"] for r in recs])
    index = {r["id"]: i for i, r in enumerate(recs)}
    injected = {i for i, r in enumerate(recs) if "near_dup_of" in r["meta"]}
    truly_similar = set()
    for i in injected:
        j = index[recs[i]["meta"]["near_dup_of"]]
        if _jaccard(recs[i]["text"].lower(), recs[j]["text"].lower()) >= 0.8:
            truly_similar.add(i)
    assert len(truly_similar) > 200
    # LSH is probabilistic (a pair at exactly 0.8 collides with p = 0.98; most are higher)
    assert len(truly_similar & res.duplicates) >= 0.99 * len(truly_similar)
    assert all(s >= 0.8 for _, _, s in res.pairs)


def test_ngrams_never_cross_documents():
    hashes, offsets = word_hashes(["a b c", "d e", "", "f g h i"])
    grams, goff = ngram_hashes(hashes, offsets, 3)
    assert np.diff(goff).tolist() == [1, 1, 0, 2]  # "d e" is shorter than 3: one whole-doc gram
    alone, _ = ngram_hashes(*word_hashes(["f g h i"]), 3)
    assert grams[goff[3] : goff[4]].tolist() == alone.tolist()


def test_verification_in_small_chunks_gives_the_same_clusters():
    from trainteam.curation.synthetic import TextCorpusConfig, iter_text_corpus

    texts = [r["text"] for r in iter_text_corpus(TextCorpusConfig(n_docs=400, seed=8))]
    whole = near_duplicates(texts)
    chunked = near_duplicates(texts, NearDupConfig(verify_chunk=3))
    assert chunked.pairs == whole.pairs and chunked.survivor_of == whole.survivor_of
    assert whole.survivor_of


def test_selecting_and_joining_tokenized_batches_matches_tokenizing_again():
    from trainteam.curation.text import tokenize

    texts = ["One two three.", "", "Four, five!", "six seven eight nine"]
    whole = tokenize(texts, stats=True)
    part = whole.select([True, False, False, True])
    again = tokenize([texts[0], texts[3]], stats=True)
    for field in ("hashes", "offsets", "lengths", "has_letter", "doc_nonspace", "doc_nonalpha"):
        assert getattr(part, field).tolist() == getattr(again, field).tolist(), field
    joined = part.concat(tokenize(["Four, five!"]))
    direct = tokenize([texts[0], texts[3], texts[2]])
    assert joined.hashes.tolist() == direct.hashes.tolist() and joined.offsets.tolist() == direct.offsets.tolist()
