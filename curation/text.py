"""Text normalization and vectorized word / n-gram hashing.

Near-dup detection and decontamination both need the word n-grams of every
document. Tokenizing word by word in Python costs ~0.6 µs a word and capped the
whole pipeline (LIBRARY-NOTES: rensa end to end ~6k docs/s because of Python
shingling), so a batch of documents is hashed at once in numpy: NFKC + lower-case
each text, join them, mark word bytes ([0-9a-z_] and every non-ASCII byte), and
hash each word from its bytes read as little-endian uint64 chunks, mixed by the
splitmix64 finalizer. The hashes are stable across processes and machines.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

_U64 = np.uint64

_WORD_BYTE = np.zeros(256, dtype=bool)
for _c in b"0123456789abcdefghijklmnopqrstuvwxyz_":
    _WORD_BYTE[_c] = True
_WORD_BYTE[0x80:] = True  # UTF-8 lead/continuation bytes: letters of other scripts
_LETTER_BYTE = _WORD_BYTE.copy()
_LETTER_BYTE[list(b"0123456789_")] = False
_SPACE_BYTE = np.zeros(256, dtype=bool)
_SPACE_BYTE[list(b" \t\n\r\x0b\x0c")] = True

_MAX_CHUNKS = 64  # words longer than 512 bytes are hashed on their first 512
_BASE = _U64(0x9E3779B97F4A7C15)  # odd, so invertible modulo 2^64
_BASE_INV = _U64(pow(int(_BASE), -1, 2**64))
_POW = np.ones(1, dtype=np.uint64)
_IPOW = np.ones(1, dtype=np.uint64)


def content_hash(text: str) -> str:
    """Hex digest of the normalized word sequence (16 bytes of BLAKE2b: collision-safe at
    any corpus size). Case, punctuation and spacing do not change it."""
    hashes, offsets = word_hashes([text])
    return content_hashes(hashes, offsets)[0]


def content_hashes(hashes: np.ndarray, offsets: np.ndarray) -> list[str]:
    """:func:`content_hash` of every document of a :func:`word_hashes` batch."""
    return [
        hashlib.blake2b(hashes[offsets[i] : offsets[i + 1]].tobytes(), digest_size=16).hexdigest()
        for i in range(offsets.size - 1)
    ]


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finalizer: spreads bits so that band keys and min-hashes are uniform."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


@dataclass
class Words:
    """The words of a batch of documents. ``hashes[offsets[i]:offsets[i+1]]`` belong to
    document i; with ``stats`` also each word's byte length and whether it has a letter,
    and per document the non-space and the non-space-non-letter byte counts."""

    hashes: np.ndarray
    offsets: np.ndarray
    lengths: np.ndarray | None = None
    has_letter: np.ndarray | None = None
    doc_nonspace: np.ndarray | None = None
    doc_nonalpha: np.ndarray | None = None

    def select(self, keep: np.ndarray | Sequence[bool]) -> Words:
        """The words of the documents where ``keep`` is true, in order (stats included)."""
        keep = np.asarray(keep, dtype=bool)
        counts = np.diff(self.offsets)
        word_mask = np.repeat(keep, counts)
        offsets = np.zeros(int(keep.sum()) + 1, dtype=np.int64)
        np.cumsum(counts[keep], out=offsets[1:])

        def pick(a: np.ndarray | None, per_doc: bool) -> np.ndarray | None:
            return None if a is None else (a[keep] if per_doc else a[word_mask])

        return Words(
            self.hashes[word_mask],
            offsets,
            pick(self.lengths, False),
            pick(self.has_letter, False),
            pick(self.doc_nonspace, True),
            pick(self.doc_nonalpha, True),
        )

    def concat(self, other: Words) -> Words:
        """Hashes and offsets of ``self``'s documents followed by ``other``'s (stats dropped)."""
        offsets = np.concatenate((self.offsets, other.offsets[1:] + self.offsets[-1]))
        return Words(np.concatenate((self.hashes, other.hashes)), offsets)


def per_doc_sum(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sum of ``values`` over each document's slice (empty documents give 0)."""
    cs = np.zeros(values.size + 1, dtype=np.float64 if values.dtype.kind == "f" else np.int64)
    np.cumsum(values, out=cs[1:])
    return cs[offsets[1:]] - cs[offsets[:-1]]


def tokenize(texts: Sequence[str], stats: bool = False) -> Words:
    """Find and hash the words of many texts at once (see :func:`word_hashes`)."""
    n = len(texts)
    offsets = np.zeros(n + 1, dtype=np.int64)
    encoded = [unicodedata.normalize("NFKC", t).lower().encode("utf-8") for t in texts]
    lens = np.fromiter((len(b) + 1 for b in encoded), dtype=np.int64, count=n)
    doc_starts = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(lens, out=doc_starts[1:])
    buf = b"\n".join(encoded) + b"\n" + bytes(8)
    data = np.frombuffer(buf, dtype=np.uint8)
    is_word = np.zeros(data.size + 1, dtype=np.int8)
    is_word[1:] = _WORD_BYTE[data]
    edges = np.flatnonzero(np.diff(is_word))
    starts, ends = edges[0::2], edges[1::2]
    wlen = ends - starts
    hashes = np.zeros(0, dtype=np.uint64)
    if starts.size:
        chunks = np.ndarray(shape=(data.size - 7,), dtype="<u8", buffer=buf, strides=(1,))
        hashes = _mix(_chunk(chunks, starts, wlen) ^ (wlen.astype(np.uint64) * _U64(0x9E3779B97F4A7C15)))
        for k in range(1, _MAX_CHUNKS):
            sel = np.flatnonzero(wlen > 8 * k)
            if sel.size == 0:
                break
            hashes[sel] = _mix(hashes[sel] ^ _chunk(chunks, starts[sel] + 8 * k, wlen[sel] - 8 * k))
    offsets[:-1] = np.searchsorted(starts, doc_starts[:-1])  # first word at or after each document start
    offsets[-1] = starts.size
    words = Words(hashes, offsets)
    if stats:
        body = data[: doc_starts[-1]]
        letter = _LETTER_BYTE[body]
        nonspace = ~_SPACE_BYTE[body]
        byte_offsets = doc_starts.copy()
        words.doc_nonspace = per_doc_sum(nonspace, byte_offsets)
        words.doc_nonalpha = per_doc_sum(nonspace & ~letter, byte_offsets)
        cs = np.zeros(body.size + 1, dtype=np.int64)
        np.cumsum(letter, out=cs[1:])
        words.lengths = wlen
        words.has_letter = (cs[ends] - cs[starts]) > 0
    return words


def word_hashes(texts: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Hash the words of many texts at once.

    Returns ``(hashes, offsets)``: ``hashes[offsets[i]:offsets[i+1]]`` are the uint64
    hashes of the words of ``texts[i]``, in order. A word is read 8 bytes at a time
    through an unaligned uint64 view, so the cost is per word, not per byte.
    """
    words = tokenize(texts)
    return words.hashes, words.offsets


def _chunk(chunks: np.ndarray, at: np.ndarray, remaining: np.ndarray) -> np.ndarray:
    """The next (up to) 8 bytes of each word, the bytes past its end zeroed."""
    nbytes = np.minimum(remaining, 8).astype(np.uint64)
    mask = np.where(nbytes >= 8, _U64(0xFFFFFFFFFFFFFFFF), (_U64(1) << (nbytes * _U64(8))) - _U64(1))
    return chunks[at] & mask


def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B^j and B^-j (mod 2^64) for j < n, grown on demand and cached."""
    global _POW, _IPOW
    if _POW.size < n:
        size = max(n, 2 * _POW.size)
        one = np.ones(1, dtype=np.uint64)  # (a Python 1 would promote the uint64 array to float)
        _POW = np.cumprod(np.concatenate((one, np.full(size - 1, _BASE, dtype=np.uint64))), dtype=np.uint64)
        _IPOW = np.cumprod(np.concatenate((one, np.full(size - 1, _BASE_INV, dtype=np.uint64))), dtype=np.uint64)
    return _POW[:n], _IPOW[:n]


def ngram_hashes(hashes: np.ndarray, offsets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every word n-gram inside each document (never across two documents).

    A rolling polynomial hash over the word hashes (prefix sums in wrapping uint64,
    divided out by the inverse power of the odd base), so the cost does not grow
    with ``n``. A document shorter than ``n`` words gets one n-gram: all its words
    (so short texts still have a shingle); an empty document gets none.
    Returns ``(ngrams, ngram_offsets)`` laid out like :func:`word_hashes`.
    """
    if n < 1:
        raise ValueError(f"ngram size must be >= 1, got {n}")
    counts = np.diff(offsets)
    total = hashes.size
    out_counts = np.where(counts >= n, counts - n + 1, np.minimum(counts, 1))
    out_offsets = np.zeros(counts.size + 1, dtype=np.int64)
    np.cumsum(out_counts, out=out_offsets[1:])
    if total == 0:
        return np.zeros(0, dtype=np.uint64), out_offsets
    pw, ipw = _powers(total)
    prefix = np.zeros(total + 1, dtype=np.uint64)
    np.cumsum(hashes * pw, out=prefix[1:])
    doc_start = np.repeat(offsets[:-1], counts)
    doc_end = np.repeat(offsets[1:], counts)
    gidx = np.arange(total, dtype=np.int64)
    full = gidx + n <= doc_end  # complete windows
    short_first = (doc_end - doc_start < n) & (gidx == doc_start)
    starts = np.flatnonzero(full | short_first)
    ends = np.minimum(starts + n, doc_end[starts])
    lengths = (ends - starts).astype(np.uint64)
    window = (prefix[ends] - prefix[starts]) * ipw[starts]
    return _mix(window + lengths * _U64(0xD6E8FEB86659FD93)), out_offsets
