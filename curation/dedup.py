"""Exact and near-duplicate detection.

Near duplicates: MinHash over word n-gram shingles, LSH banding, then every
candidate pair is checked against the threshold with the exact Jaccard of the two
shingle sets, and verified pairs are joined into clusters by union-find; the
earliest document of a cluster survives (deterministic: stream order).

Hashing choice (measured here, 20k x 1 KB docs, see benchmarks/dedup.py): the
shingles are hashed in numpy (``text.word_hashes``) and the MinHash signatures are
computed by rensa's Rust ``digest_matrix_from_flat_token_hashes`` from that flat
buffer, so no Python object is created per word or per shingle. datasketch spends
~1 ms a document in Python; rensa alone was capped by Python shingling.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from trainteam.curation.text import Words, content_hashes, ngram_hashes, tokenize, word_hashes

_U64 = np.uint64


class NearDupConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    threshold: float = Field(0.8, gt=0, lt=1, description="Jaccard similarity of shingle sets")
    ngram: int = Field(5, ge=1, le=32, description="word n-gram shingle size")
    num_perm: int = Field(128, ge=8, le=1024)
    fp_weight: float = Field(0.02, ge=0, le=1, description="weight of false positives when choosing bands x rows")
    fn_weight: float = Field(0.98, ge=0, le=1, description="weight of false negatives (missed pairs)")
    bands: int | None = Field(None, ge=1, description="override the optimized bands")
    rows: int | None = Field(None, ge=1, description="override the optimized rows per band")
    seed: int = 42
    max_group_pairs: int = Field(64, ge=2, description="bucket size above which only star pairs are checked")
    verify_chunk: int = Field(20000, ge=1, description="candidate pairs verified per batch of shingle look-ups")


@functools.lru_cache(maxsize=64)
def lsh_params(threshold: float, num_perm: int, fp_weight: float = 0.5, fn_weight: float = 0.5) -> tuple[int, int]:
    """(bands, rows) with bands*rows <= num_perm minimizing the weighted areas of false
    positives (similarity below ``threshold`` that still collide) and false negatives
    (above it that never collide) under the LSH S-curve 1-(1-s^r)^b -- the rule of
    datasketch, datatrove and text-dedup. Every candidate is verified afterwards, so a
    false positive costs only a Jaccard check while a false negative is a kept duplicate:
    the defaults weight misses 49:1 (17 bands x 7 rows at 0.8: a pair at exactly 0.8 collides with p = 0.98)."""
    s = np.linspace(0.0, 1.0, 2001)
    below, above = s <= threshold, s >= threshold
    best = (float("inf"), 1, 1)
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            p = collision_probability(s, b, r)  # at every similarity s of the grid
            fp = np.trapezoid(p[below], s[below])
            fn = np.trapezoid(1.0 - p[above], s[above])
            err = fp * fp_weight + fn * fn_weight
            if err < best[0] - 1e-12:
                best = (err, b, r)
    return best[1], best[2]


def collision_probability(similarity, bands: int, rows: int):
    """The LSH S-curve: the chance that a pair of this Jaccard similarity shares a band (scalar or array)."""
    return 1.0 - (1.0 - similarity**rows) ** bands


class UnionFind:
    """Disjoint sets over 0..n-1; the root of a set is always its smallest member."""

    def __init__(self, n: int = 0):
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        root = x
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[x] != root:
            self.parent[x], x = root, self.parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            lo, hi = (ra, rb) if ra < rb else (rb, ra)
            self.parent[hi] = lo


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """Exact Jaccard of two sorted unique uint64 arrays."""
    if a.size == 0 and b.size == 0:
        return 1.0
    inter = np.intersect1d(a, b, assume_unique=True).size
    return inter / (a.size + b.size - inter)


@dataclass
class NearDupResult:
    """Index-level outcome; ``pairs`` are the verified (i, j, jaccard) with i < j."""

    n_docs: int
    bands: int
    rows: int
    candidates: int
    pairs: list[tuple[int, int, float]]
    survivor_of: dict[int, int] = field(default_factory=dict)  # dropped index -> kept index

    @property
    def duplicates(self) -> set[int]:
        return set(self.survivor_of)


class MinHashLSH:
    """Incremental MinHash-LSH index storing only band keys (bands x 8 bytes a document),
    so millions of documents fit in memory; shingles for verification are fetched on
    demand through a callback (from memory or re-read from a spill file)."""

    def __init__(self, config: NearDupConfig | None = None):
        self.config = config or NearDupConfig()
        c = self.config
        if c.bands and c.rows:
            self.bands, self.rows = c.bands, c.rows
        else:
            self.bands, self.rows = lsh_params(c.threshold, c.num_perm, c.fp_weight, c.fn_weight)
        if self.bands * self.rows > c.num_perm:
            raise ValueError(f"bands x rows = {self.bands * self.rows} exceeds num_perm = {c.num_perm}")
        rng = np.random.default_rng(c.seed)
        self._band_mult = rng.integers(1, 2**63, size=self.rows, dtype=np.uint64) | _U64(1)
        self._keys: list[np.ndarray] = []
        self.n_docs = 0

    def shingles(self, texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        return ngram_hashes(*word_hashes(texts), self.config.ngram)

    def add_shingles(self, shingles: np.ndarray, offsets: np.ndarray) -> None:
        """Index a batch (from :meth:`shingles`); documents get consecutive indices."""
        import rensa

        n = offsets.size - 1
        if n == 0:
            return
        matrix = rensa.RMinHash.digest_matrix_from_flat_token_hashes(
            shingles, offsets.astype(np.uint64), self.config.num_perm, self.config.seed
        )
        sig = np.asarray(matrix.to_rows(), dtype=np.uint64).reshape(n, self.config.num_perm)
        empty = np.diff(offsets) == 0
        used = sig[:, : self.bands * self.rows].reshape(n, self.bands, self.rows)
        keys = (used * self._band_mult).sum(axis=2, dtype=np.uint64)
        keys ^= np.arange(self.bands, dtype=np.uint64) * _U64(0x9E3779B97F4A7C15)
        if empty.any():  # documents without words never collide with anything
            keys[empty] = np.random.default_rng(self.n_docs).integers(
                0, 2**63, size=(int(empty.sum()), self.bands), dtype=np.uint64
            )
        self._keys.append(keys)
        self.n_docs += n

    def add(self, texts: Sequence[str]) -> None:
        self.add_shingles(*self.shingles(texts))

    def add_words(self, words: Words) -> None:
        """Index documents already tokenized (``text.tokenize``)."""
        self.add_shingles(*ngram_hashes(words.hashes, words.offsets, self.config.ngram))

    def candidate_pairs(self) -> np.ndarray:
        """Unique (i, j), i < j, sharing at least one band key."""
        if self.n_docs < 2:
            return np.zeros((0, 2), dtype=np.int64)
        keys = np.concatenate(self._keys) if len(self._keys) > 1 else self._keys[0]
        self._keys = [keys]
        out: list[np.ndarray] = []
        for b in range(self.bands):
            col = keys[:, b]
            order = np.argsort(col, kind="stable")
            sk = col[order]
            boundary = np.flatnonzero(np.diff(sk) != 0) + 1
            starts = np.concatenate(([0], boundary))
            sizes = np.diff(np.concatenate((starts, [sk.size])))
            pairs_of_two = starts[sizes == 2]  # the common case, vectorized
            if pairs_of_two.size:
                out.append(np.stack((order[pairs_of_two], order[pairs_of_two + 1]), axis=1))
            for g in np.flatnonzero(sizes > 2):
                members = order[starts[g] : starts[g] + sizes[g]]
                if members.size <= self.config.max_group_pairs:
                    i, j = np.triu_indices(members.size, k=1)
                    out.append(np.stack((members[i], members[j]), axis=1))
                else:  # a huge bucket: link everyone to its earliest member
                    first = members.min()
                    rest = members[members != first]
                    out.append(np.stack((np.full(rest.size, first), rest), axis=1))
        if not out:
            return np.zeros((0, 2), dtype=np.int64)
        pairs = np.concatenate(out)
        pairs.sort(axis=1)
        return np.unique(pairs, axis=0)

    def resolve(self, get_shingles: Callable[[list[int]], dict[int, np.ndarray]]) -> NearDupResult:
        """Verify candidates with exact Jaccard and cluster them.

        ``get_shingles(indices)`` returns the sorted unique shingle array of each index."""
        cand = self.candidate_pairs()
        uf = UnionFind(self.n_docs)
        verified: list[tuple[int, int, float]] = []
        # In chunks, so that only the shingles of a chunk's documents are held at once.
        for start in range(0, cand.shape[0], self.config.verify_chunk):
            chunk = cand[start : start + self.config.verify_chunk]
            sets = get_shingles(np.unique(chunk).tolist())
            for i, j in chunk.tolist():
                sim = jaccard(sets[i], sets[j])
                if sim >= self.config.threshold:
                    verified.append((i, j, sim))
                    uf.union(i, j)
        survivor_of = {}
        for i, j, _ in verified:
            for x in (i, j):
                root = uf.find(x)
                if root != x:
                    survivor_of[x] = root
        return NearDupResult(self.n_docs, self.bands, self.rows, int(cand.shape[0]), verified, survivor_of)


def near_duplicates(texts: Sequence[str], config: NearDupConfig | None = None, batch_size: int = 2000) -> NearDupResult:
    """In-memory near-dup detection over a list of texts (indices follow the list)."""
    index = MinHashLSH(config)
    batches: list[tuple[int, np.ndarray, np.ndarray]] = []
    for s in range(0, len(texts), batch_size):
        sh, off = index.shingles(texts[s : s + batch_size])
        index.add_shingles(sh, off)
        batches.append((s, sh, off))
    starts = [b[0] for b in batches]

    def get_shingles(indices: list[int]) -> dict[int, np.ndarray]:
        out = {}
        for i in indices:
            k = bisect.bisect_right(starts, i) - 1
            first, sh, off = batches[k]
            out[i] = np.unique(sh[off[i - first] : off[i - first + 1]])
        return out

    return index.resolve(get_shingles)


class ExactDeduper:
    """Streaming exact dedup on the normalized content hash; remembers 16-byte digests."""

    def __init__(self) -> None:
        self.first_id: dict[bytes, str] = {}
        self.dropped = 0

    def check(self, rec_id: str, digest: str) -> str | None:
        """None if new (and remembered), else the id of the earlier copy."""
        key = bytes.fromhex(digest)
        seen = self.first_id.get(key)
        if seen is None:
            self.first_id[key] = rec_id
            return None
        self.dropped += 1
        return seen

    def batch(self, ids: Sequence[str], texts: Sequence[str]) -> list[str | None]:
        return self.batch_words(ids, tokenize(texts))

    def batch_words(self, ids: Sequence[str], words: Words) -> list[str | None]:
        """:meth:`check` for documents already tokenized (``text.tokenize``)."""
        return [self.check(i, d) for i, d in zip(ids, content_hashes(words.hashes, words.offsets), strict=True)]
