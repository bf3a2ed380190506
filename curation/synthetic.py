"""English-like demo text with known defects, so curation has measurable work.

Documents are sentences of Zipf-distributed pseudo-words mixed with real English
function words (so stop-word and word-length filters see realistic text). Some
documents are near-copies of others (a few word edits) and some carry a verbatim
passage of an eval set; both are recorded so a report can say how many were caught.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic

STOP_WORDS = (
    "the of and to a in is that it was for on are as with his they at be this from have or by "
    "one had not but what all were when we there can an your which their said if do will each "
    "about how up out them then she many some so these would other into has more her two like "
    "him see time could no make than first been its who now people my made over did down only way"
).split()

GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")

_ONSETS = [
    "b",
    "c",
    "d",
    "f",
    "g",
    "h",
    "k",
    "l",
    "m",
    "n",
    "p",
    "r",
    "s",
    "t",
    "v",
    "w",
    "br",
    "cl",
    "st",
    "tr",
    "pl",
    "gr",
    "sh",
    "ch",
]
_VOWELS = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
_CODAS = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ng"]


def make_vocabulary(size: int, seed: int = 0) -> list[str]:
    """Pronounceable pseudo-words of 1-3 syllables, distinct, deterministic."""
    rng = random.Random(f"vocab:{seed}")
    words: list[str] = []
    seen = set(STOP_WORDS)
    while len(words) < size:
        w = "".join(
            rng.choice(_ONSETS) + rng.choice(_VOWELS) + rng.choice(_CODAS) for _ in range(rng.choice((1, 2, 2, 3)))
        )
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


class TextWriter:
    """Draws sentences: about 45 % function words, the rest content words from a Zipf law."""

    def __init__(self, seed: int = 0, vocab_size: int = 20000):
        self.vocab = np.array(make_vocabulary(vocab_size, seed))
        self.stop = np.array(STOP_WORDS)
        self.gopher = np.array(GOPHER_STOP_WORDS)
        ranks = np.arange(1, vocab_size + 1, dtype=np.float64)
        p = 1.0 / ranks**1.05
        self.cdf = np.cumsum(p / p.sum())
        self.rng = np.random.default_rng(seed)

    def words(self, n: int) -> list[str]:
        is_stop = self.rng.random(n) < 0.45
        idx = np.minimum(np.searchsorted(self.cdf, self.rng.random(n)), len(self.vocab) - 1)
        content = self.vocab[idx]
        # half of the function words are the eight Gopher stop words (as in English text)
        common = self.rng.random(n) < 0.5
        stops = np.where(
            common,
            self.gopher[self.rng.integers(0, len(self.gopher), size=n)],
            self.stop[self.rng.integers(0, len(self.stop), size=n)],
        )
        return np.where(is_stop, stops, content).tolist()

    def text(self, n_chars: int) -> str:
        """About ``n_chars`` of sentences (capitalized, full stops, a comma now and then)."""
        pool = self.words(n_chars // 5 + 20)
        lengths = self.rng.integers(6, 20, size=len(pool) // 6 + 1)
        out: list[str] = []
        total = pos = 0
        for n in lengths:
            n = int(n)
            if total >= n_chars or pos + n > len(pool):
                break
            ws = pool[pos : pos + n]
            pos += n
            ws[0] = ws[0].capitalize()
            if n > 10 and n % 2:
                ws[n // 2] += ","
            s = " ".join(ws) + "."
            out.append(s)
            total += len(s) + 1
        return " ".join(out)


def mutate(text: str, n_edits: int, rng: random.Random, writer_words: list[str]) -> str:
    """A near-copy: ``n_edits`` single-word replacements, deletions or insertions."""
    words = text.split()
    for _ in range(n_edits):
        if len(words) < 3:
            break
        i = rng.randrange(len(words))
        op = rng.random()
        if op < 0.5:
            words[i] = rng.choice(writer_words)
        elif op < 0.75:
            del words[i]
        else:
            words.insert(i, rng.choice(writer_words))
    return " ".join(words)


class TextCorpusConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n_docs: int = Field(2000, ge=1)
    doc_chars: int = Field(1000, ge=50)
    near_dup_fraction: float = Field(0.1, ge=0, le=0.9)
    max_edits: int = Field(3, ge=0, description="near-copies get 1..max_edits word edits (3 keeps Jaccard >= ~0.8)")
    exact_dup_fraction: float = Field(0.0, ge=0, le=0.9)
    seed: int = 0


def iter_text_corpus(cfg: TextCorpusConfig) -> Iterator[dict]:
    """Stream ``{id, text, meta}`` records; near-copies have ``meta.near_dup_of`` set to
    the id of their original (which always comes earlier). Constant memory: originals are
    remembered in a bounded reservoir."""
    writer = TextWriter(cfg.seed)
    rng = random.Random(f"corpus:{cfg.seed}")
    filler = writer.words(5000)
    recent: list[tuple[str, str]] = []
    for i in range(cfg.n_docs):
        rid = f"doc-{i:07d}"
        roll = rng.random()
        if recent and roll < cfg.near_dup_fraction:
            src_id, src_text = rng.choice(recent)
            text = mutate(src_text, rng.randint(1, max(1, cfg.max_edits)), rng, filler)
            yield {"id": rid, "text": text, "meta": {"near_dup_of": src_id}}
            continue
        if recent and roll < cfg.near_dup_fraction + cfg.exact_dup_fraction:
            src_id, src_text = rng.choice(recent)
            yield {"id": rid, "text": src_text, "meta": {"exact_dup_of": src_id}}
            continue
        text = writer.text(cfg.doc_chars)
        if len(recent) < 2000:
            recent.append((rid, text))
        else:
            recent[rng.randrange(len(recent))] = (rid, text)
        yield {"id": rid, "text": text, "meta": {}}


class DemoCorpusConfig(TextCorpusConfig):
    """The demo corpus: English-like text with injected near-copies, eval leaks and junk."""

    leak_fraction: float = Field(0.02, ge=0, le=0.5)
    junk_fraction: float = Field(0.03, ge=0, le=0.5)
    n_eval_passages: int = Field(50, ge=1)
    n_eval_arithmetic: int = Field(50, ge=1)


def demo_eval_sets(cfg: DemoCorpusConfig) -> dict[str, list[dict]]:
    """Two eval sets: short reading passages and addition problems (the demo task's eval)."""
    writer = TextWriter(cfg.seed + 1_000_003)
    passages = [{"id": f"passage-{i:04d}", "text": writer.text(260)} for i in range(cfg.n_eval_passages)]
    _, arithmetic = generate_arithmetic(ArithmeticConfig(n_train=0, n_eval=cfg.n_eval_arithmetic, seed=cfg.seed))
    return {"passages": passages, "addition": arithmetic}


_JUNK_KINDS = ("short", "symbols", "repeated_lines", "no_stop_words")


def _junk(kind: str, writer: TextWriter, rng: random.Random) -> str:
    if kind == "short":
        return writer.text(60)
    if kind == "symbols":
        words = writer.text(600).split()
        return " ".join(w if rng.random() < 0.6 else "### ..." for w in words)
    if kind == "repeated_lines":
        line = writer.text(80)
        return "\n".join([line] * 12)
    return " ".join(w for w in writer.text(1500).split() if w.lower().strip(".,") not in STOP_WORDS)


def iter_demo_corpus(cfg: DemoCorpusConfig, eval_sets: dict[str, list[dict]] | None = None) -> Iterator[dict]:
    """Stream the demo corpus. Injected defects are labelled in ``meta`` so a report can
    count what curation caught: ``near_dup_of`` / ``exact_dup_of``, ``leak_of``
    (``"set/id"``), ``junk`` (the kind). Leaky and junk documents come in addition to
    the ``n_docs`` of the text corpus (originals stay intact for their near-copies)."""
    eval_sets = eval_sets if eval_sets is not None else demo_eval_sets(cfg)
    leak_pool = [(name, ex) for name, exs in eval_sets.items() for ex in exs]
    writer = TextWriter(cfg.seed + 7)
    rng = random.Random(f"demo:{cfg.seed}")
    base = TextCorpusConfig(**{k: getattr(cfg, k) for k in TextCorpusConfig.model_fields})
    for rec in iter_text_corpus(base):
        yield rec
        roll = rng.random()
        if roll < cfg.leak_fraction and leak_pool:
            name, ex = rng.choice(leak_pool)
            leaked = ex["text"] if "text" in ex else f"{ex['prompt']}{ex['completion']}"
            sentences = writer.text(cfg.doc_chars).split(". ")
            cut = len(sentences) // 2
            text = ". ".join(sentences[:cut]) + ". " + leaked + " " + ". ".join(sentences[cut:])
            yield {"id": f"{rec['id']}-leak", "text": text, "meta": {"leak_of": f"{name}/{ex['id']}"}}
        elif roll < cfg.leak_fraction + cfg.junk_fraction:
            kind = _JUNK_KINDS[rng.randrange(len(_JUNK_KINDS))]
            yield {"id": f"{rec['id']}-junk", "text": _junk(kind, writer, rng), "meta": {"junk": kind}}
