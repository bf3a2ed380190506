"""``curate()``: the whole chain in one call, streaming, with lineage.

source -> [row checks] -> exact dedup -> quality filters -> decontamination -> near-dup dedup -> output.

Pretraining text goes through the text-quality filters. Chat, prompt/completion and preference
rows (``config.rows``; records from ``row_checks.row_records``) get the row-level checks of
``row_checks`` instead, dedup compares their rendering, and decontamination their prompt side
against the eval rows' prompt side (a leaking row is dropped: a conversation is not cut).

Near-dup removal needs to see every document before it can choose survivors, so
the records that pass the first stages are spilled to disk (byte offsets kept)
while their LSH band keys are indexed; candidate pairs are then verified from the
spill and a second pass copies the survivors. Memory is the band keys and offsets
(~140 bytes a document), not the corpus.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
import uuid
from array import array
from collections.abc import Iterator, Mapping
from itertools import islice
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from trainteam.core.errors import BadInput
from trainteam.core.hashing import file_fingerprint
from trainteam.curation.decontam import DecontamConfig, EvalIndex, decontaminate
from trainteam.curation.dedup import ExactDeduper, MinHashLSH, NearDupConfig, NearDupResult
from trainteam.curation.jsonl import read_jsonl
from trainteam.curation.lineage import (
    DatasetFacts,
    Recorded,
    RecordsFingerprint,
    intact,
    records_fingerprint,
    source_fingerprint,
    version_key,
)
from trainteam.curation.quality import QualityConfig, QualityFilter
from trainteam.curation.row_checks import RowChecker, RowChecksConfig, RowExample, contents, prompt_side, row_of
from trainteam.curation.sources import (
    SkipCounter,
    check_source,
    iter_items,
    iter_records,
    source_name,
    source_where,
)
from trainteam.curation.text import Words, tokenize

_DUP_FLAGS = ("near_dup_of", "exact_dup_of")


class CurationConfig(BaseModel):
    """Every stage is configurable; set a stage to ``None`` (or ``exact_dedup=False``) to skip it."""

    model_config = ConfigDict(extra="forbid")

    text_field: str = "text"
    skip_bad: bool = Field(False, description="skip (and count) malformed input lines instead of stopping")
    txt_mode: Literal["paragraph", "line", "file"] = "paragraph"
    streaming: bool = Field(False, description="read files through datasets' streaming mode")
    exact_dedup: bool = True
    quality: QualityConfig | None = Field(default_factory=QualityConfig)
    decontam: DecontamConfig | None = Field(default_factory=DecontamConfig)
    near_dedup: NearDupConfig | None = Field(default_factory=NearDupConfig)
    rows: RowChecksConfig | None = Field(
        None,
        description="chat, prompt/completion and preference rows: the "
        "row-level checks; records come from row_checks.row_records",
    )
    max_drop_fraction: float | None = Field(
        0.5,
        ge=0,
        le=1,
        description="more of the input removed than this "
        "and a run stops to ask a person (None: never asks); not part "
        "of the version, which it does not change",
    )
    batch_size: int = Field(2000, ge=1, le=1_000_000)
    max_listed: int = Field(1000, ge=0, description="ids listed per category in the report (counts are exact)")


class InjectedCount(BaseModel):
    injected: int = 0
    caught: int = 0


class CurationReport(BaseModel):
    version: str
    node_id: str | None = Field(None, description="the DatasetVersion node its caller recorded")
    output: str | None = None
    content_hash: str | None = None
    reused: bool = False
    counts: dict[str, int] = Field(default_factory=dict)
    quality_dropped: dict[str, int] = Field(default_factory=dict)
    quality_examples: dict[str, list[str]] = Field(default_factory=dict, description="rule -> a few ids it dropped")
    row_dropped: dict[str, int] = Field(default_factory=dict, description="row-level rule -> rows it dropped")
    row_examples: dict[str, list[RowExample]] = Field(default_factory=dict)
    leaked_eval_examples: dict[str, list[str]] = Field(default_factory=dict)
    leak_dropped_ids: list[str] = Field(default_factory=list)
    leak_cut_ids: list[str] = Field(default_factory=list)
    exact_duplicates: list[tuple[str, str]] = Field(default_factory=list, description="(dropped id, kept id)")
    near_duplicates: list[tuple[str, str, float]] = Field(
        default_factory=list,
        description="(dropped, kept, Jaccard of the pair; in a chain, the dropped doc's best verified match)",
    )
    lsh: dict[str, int] = Field(default_factory=dict)
    injected: dict[str, InjectedCount] = Field(default_factory=dict)
    skipped_examples: list[str] = Field(default_factory=list)
    unchecked_eval_examples: list[str] = Field(default_factory=list)
    seconds: float = 0.0
    records: list[dict] | None = Field(None, exclude=True, description="the output, when no out_dir was given")
    facts: DatasetFacts | None = Field(
        None, exclude=True, description="the version built in out_dir, for the caller to record (None when reused)"
    )

    def summary(self) -> str:
        c = self.counts
        lines = [
            f"dataset version {self.version}" + (" (reused: already curated)" if self.reused else ""),
            f"  input {c.get('input', 0)}  ->  output {c.get('output', 0)}",
            f"  skipped malformed {c.get('skipped_bad', 0)}, row checks {c.get('row_dropped', 0)}, "
            f"exact dups {c.get('exact_duplicates', 0)}, quality {c.get('quality_dropped', 0)}, "
            f"leaks dropped {c.get('leak_dropped', 0)} / cut {c.get('leak_cut', 0)}, "
            f"near dups {c.get('near_duplicates', 0)}",
        ]
        for name, n in self.injected.items():
            if n.injected:
                lines.append(f"  injected {name}: caught {n.caught}/{n.injected}")
        if self.output:
            lines.append(f"  written to {self.output}")
        return "\n".join(lines)

    def drop_fraction(self) -> float:
        """The share of the input that did not reach the output (cut pieces of a leaking text count
        as kept)."""
        n = self.counts.get("input", 0)
        return max(0.0, (n - self.counts.get("output", 0)) / n) if n else 0.0

    def removed(self, limit: int = 3) -> dict[str, dict[str, Any]]:
        """Every rule that removed records: ``{rule: {"count": n, "examples": [...]}}`` (a few
        ids with the reason), as a person reads it before training goes on with what is left."""
        c = self.counts
        found: dict[str, tuple[int, list[str]]] = {
            "skipped_malformed": (c.get("skipped_bad", 0), self.skipped_examples[:limit]),
            "exact_duplicates": (
                c.get("exact_duplicates", 0),
                [f"{d} (same as {k})" for d, k in self.exact_duplicates[:limit]],
            ),
            "eval_leaks": (
                c.get("leak_dropped", 0) + c.get("leak_cut", 0),
                (self.leak_dropped_ids + self.leak_cut_ids)[:limit],
            ),
            "near_duplicates": (
                c.get("near_duplicates", 0),
                [f"{d} (~{k}, Jaccard {s:.2f})" for d, k, s in self.near_duplicates[:limit]],
            ),
        }
        for rule, n in self.row_dropped.items():
            found[f"rows.{rule}"] = (n, [f"{e.id}: {e.why}" for e in self.row_examples.get(rule, [])[:limit]])
        for rule, n in self.quality_dropped.items():
            found[f"quality.{rule}"] = (n, self.quality_examples.get(rule, [])[:limit])
        return {rule: {"count": n, "examples": ex} for rule, (n, ex) in found.items() if n}

    def removed_text(self) -> str:
        """``rule n, ...`` of every rule that removed records (``nothing removed`` when none did)."""
        return ", ".join(f"{rule} {r['count']}" for rule, r in self.removed().items()) or "nothing removed"


class NothingKept(BadInput):
    """Curation would write a version of 0 rows: refused, nothing written. ``report`` says which rules removed
    what, so a caller can say which to loosen."""

    def __init__(self, where: str, report: CurationReport):
        n = report.counts.get("input", 0)
        self.reason = f"no row is left of {n} after curation ({report.removed_text()})"
        super().__init__(f"{where}: {self.reason}")
        self.report = report


def load_eval_sets(eval_sets: Mapping[str, Any] | None) -> dict[str, list[dict]]:
    """Eval sets as lists of examples; a path is read (``.jsonl`` as-is, other kinds as records)."""
    out: dict[str, list[dict]] = {}
    for name, src in (eval_sets or {}).items():
        if isinstance(src, (str, Path)):
            p = Path(src)
            # the one reader: an eval set with no rows is refused (decontaminating against nothing says "no leaks")
            out[name] = [raw for *_, raw in iter_items(p)] if p.suffix == ".jsonl" else list(iter_records(p))
        else:
            out[name] = [dict(x) for x in src]
    return out


def _batches(it: Iterator[dict], size: int) -> Iterator[list[dict]]:
    while batch := list(islice(it, size)):
        yield batch


def _leak_text(rows: RowChecksConfig | None):
    """What decontamination compares of a row (training or eval): its prompt side, or its contents."""
    return prompt_side if rows is not None and rows.leaks_on == "prompt" else contents


def _index_sets(eval_sets: dict[str, list[dict]], rows: RowChecksConfig | None) -> dict[str, list[dict]]:
    """The eval examples as decontamination reads them: the side of each row that ``rows.leaks_on``
    names when the training records are rows; else text, prompt and completion, or a conversation's
    contents."""
    side = _leak_text(rows)
    out: dict[str, list[dict]] = {}
    for name, examples in eval_sets.items():
        shaped = []
        for k, ex in enumerate(examples):
            if rows is not None or ("text" not in ex and "prompt" not in ex) or "chosen" in ex:
                try:
                    text = side(ex)
                except (ValueError, KeyError, TypeError) as exc:
                    raise BadInput(f"eval set {name}: example {k + 1}: {exc}") from None
                shaped.append({"id": ex.get("id", k), "text": text})
            else:
                shaped.append(ex)
        out[name] = shaped
    return out


class _Run:
    """State of one curation pass: counters, report lists, and the stages."""

    def __init__(self, config: CurationConfig, eval_sets: dict[str, list[dict]], tokenizer: Any = None):
        self.cfg = config
        self.counts = dict.fromkeys(
            (
                "input",
                "skipped_bad",
                "row_dropped",
                "exact_duplicates",
                "quality_dropped",
                "leak_dropped",
                "leak_cut",
                "near_duplicates",
                "output",
            ),
            0,
        )
        self.injected = {k: InjectedCount() for k in ("duplicates", "leaks", "junk")}
        self.rows = RowChecker(config.rows, tokenizer) if config.rows else None
        self.exact = ExactDeduper() if config.exact_dedup else None
        self.quality = QualityFilter(config.quality, max_examples=config.max_listed) if config.quality else None
        decontam = config.decontam
        if decontam is not None and self.rows is not None:
            decontam = decontam.model_copy(update={"mode": "drop"})  # a conversation is dropped, never cut
        self.index = EvalIndex.build(_index_sets(eval_sets, config.rows), decontam) if decontam and eval_sets else None
        self.lsh = MinHashLSH(config.near_dedup) if config.near_dedup else None
        self.leaked: dict[str, set[str]] = {}
        self.exact_pairs: list[tuple[str, str]] = []
        self.leak_dropped: list[str] = []
        self.leak_cut: list[str] = []

    def _flags(self, rec: dict) -> tuple[bool, bool, bool]:
        meta = rec.get("meta") or {}
        return any(k in meta for k in _DUP_FLAGS), "leak_of" in meta, "junk" in meta

    def _caught(self, rec: dict) -> None:
        dup, leak, junk = self._flags(rec)
        for flag, name in ((dup, "duplicates"), (leak, "leaks"), (junk, "junk")):
            if flag:
                self.injected[name].caught += 1

    def _keep(self, batch: list[dict], words: Words, keep, counter: str) -> tuple[list[dict], Words]:
        """The records where ``keep`` is true; the others counted under ``counter`` (and as caught)."""
        for rec, k in zip(batch, keep, strict=True):
            if not k:
                self.counts[counter] += 1
                self._caught(rec)
        return [r for r, k in zip(batch, keep, strict=True) if k], words.select(keep)

    def stage_one(self, batch: list[dict]) -> tuple[list[dict], Words]:
        """Row checks, exact dedup, quality, decontamination; returns the records that go on and
        their words. The batch is tokenized once and every stage reads that (a record cut by
        decontamination is tokenized again; its pieces go after the batch's clean records)."""
        for rec in batch:
            for flag, name in zip(self._flags(rec), ("duplicates", "leaks", "junk"), strict=True):
                if flag:
                    self.injected[name].injected += 1
        words = tokenize([r["text"] for r in batch], stats=self.quality is not None)
        if self.rows is not None:
            keep = self.rows.batch([r["id"] for r in batch], [row_of(r) for r in batch])
            batch, words = self._keep(batch, words, keep, "row_dropped")
        if self.exact is not None and batch:
            firsts = self.exact.batch_words([r["id"] for r in batch], words)
            for rec, first in zip(batch, firsts, strict=True):
                if first is not None and len(self.exact_pairs) < self.cfg.max_listed:
                    self.exact_pairs.append((rec["id"], first))
            batch, words = self._keep(batch, words, [f is None for f in firsts], "exact_duplicates")
        if self.quality is not None and batch:
            verdicts = self.quality.batch([r["text"] for r in batch], words, ids=[r["id"] for r in batch])
            batch, words = self._keep(batch, words, verdicts, "quality_dropped")
        if self.index is not None and batch:
            batch, words = self._decontaminate(batch, words, self.index)
        return batch, words

    def _decontaminate(self, batch: list[dict], words: Words, index: EvalIndex) -> tuple[list[dict], Words]:
        """Drop (or cut) the records that share an n-gram with an eval example; rows are compared on
        their prompt side (``row_checks.prompt_side``) or contents (``leaks_on``), text on the text."""
        listed = self.cfg.max_listed
        found = words
        if self.rows is not None:
            side = _leak_text(self.cfg.rows)
            found = tokenize([side(row_of(r)) for r in batch])
        clean = np.ones(len(batch), dtype=bool)
        pieces: list[dict] = []
        for k, (rec, outcome) in enumerate(zip(batch, decontaminate(batch, index, found), strict=True)):
            if outcome.action == "clean":
                continue
            clean[k] = False
            pieces.extend(outcome.kept)
            self._caught(rec)
            for name in outcome.leaked:
                set_name, _, ex_id = name.partition("/")
                self.leaked.setdefault(set_name, set()).add(ex_id)
            key = "leak_dropped" if outcome.action == "dropped" else "leak_cut"
            self.counts[key] += 1
            target = self.leak_dropped if outcome.action == "dropped" else self.leak_cut
            if len(target) < listed:
                target.append(rec["id"])
        batch, words = [r for r, k in zip(batch, clean, strict=True) if k], words.select(clean)
        if pieces:
            batch, words = batch + pieces, words.concat(tokenize([p["text"] for p in pieces]))
        return batch, words


def _read_lines(path: Path, offsets: array, indices: list[int]) -> dict[int, dict]:
    out = {}
    with path.open("rb") as fh:
        for i in sorted(indices):
            fh.seek(offsets[i])
            out[i] = json.loads(fh.readline())
    return out


def _verify_from_spill(lsh: MinHashLSH, spill: Path, offsets: array) -> NearDupResult:
    def get_shingles(indices: list[int]) -> dict[int, np.ndarray]:
        sets: dict[int, np.ndarray] = {}
        for start in range(0, len(indices), 5000):
            chunk = indices[start : start + 5000]
            recs = _read_lines(spill, offsets, chunk)
            sh, off = lsh.shingles([recs[i]["text"] for i in chunk])
            for k, i in enumerate(chunk):
                sets[i] = np.unique(sh[off[k] : off[k + 1]])
        return sets

    return lsh.resolve(get_shingles)


def curate(
    corpus: Any,
    eval_sets: Mapping[str, Any] | None = None,
    config: CurationConfig | None = None,
    recorded: Recorded | None = None,
    out_dir: str | Path | None = None,
    progress: bool = True,
    tokenizer: Any = None,
) -> CurationReport:
    """Run the whole chain over ``corpus`` (any source ``iter_records`` takes).

    With ``out_dir`` the output is ``out_dir/data.jsonl`` and the report
    ``out_dir/report.json``; without, the records come back in ``report.records``.
    The same corpus, eval sets and config give the same version; with ``recorded`` (the
    caller's record of versions, by key) a version already on disk is returned without
    any work (``report.reused``). A version built in ``out_dir`` comes back with the
    facts its caller records (``report.facts``). ``tokenizer``: the task's, which the row checks
    count tokens with (``config.rows.max_tokens``); the version then depends on it too.
    """
    config = config or CurationConfig()
    check_source(corpus)  # before it is hashed: /dev/zero would never end
    evals = load_eval_sets(eval_sets)
    if recorded is not None and out_dir is None:
        raise BadInput("out_dir: needed to record a dataset version")
    params = version_params(config, tokenizer)
    eval_fps = {name: records_fingerprint(exs) for name, exs in evals.items()}
    corpus_fp = source_fingerprint(corpus)
    if recorded is not None and corpus_fp is not None:
        reused = _reused(recorded, _key(corpus_fp, eval_fps, params))
        if reused is not None:
            return reused

    t0 = time.perf_counter()
    run = _Run(config, evals, tokenizer)
    skipped = SkipCounter()
    tmp = tempfile.TemporaryDirectory(prefix="curate-") if out_dir is None else None
    work = Path(tmp.name) if tmp is not None else Path(out_dir or ".")
    final = work / "data.jsonl"
    # Two runs of one workspace may build the same version at once: each writes its own files and
    # moves the (identical) result into place, so neither finds the other's half-written ones.
    tag = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
    stream_hash = RecordsFingerprint() if corpus_fp is None else None
    near, near_pairs = _passes(run, corpus, skipped, work, tag, stream_hash, progress)
    run.counts["skipped_bad"] = skipped.count
    fp = stream_hash.hexdigest() if stream_hash is not None else corpus_fp or ""
    report = _report(run, _key(fp, eval_fps, params), near, near_pairs, skipped)
    if tmp is not None:  # no out_dir: the records come back in the report
        report.records = read_jsonl(final) if final.stat().st_size else []
        tmp.cleanup()
    else:
        report.output = str(final)
        report.content_hash = file_fingerprint(final)
    report.seconds = round(time.perf_counter() - t0, 3)
    if out_dir is not None:
        report_path = work / "report.json"
        report.facts = DatasetFacts(
            key=report.version,
            path=str(final),
            content_hash=report.content_hash,
            counts=run.counts,
            params=params,
            inputs=[(fp, source_name(corpus))],
            checked_against=[(efp, f"eval:{n}") for n, efp in eval_fps.items()],
            report=str(report_path),
        )
        staged_report = work / f".report-{tag}.json"
        staged_report.write_text(report.model_dump_json(indent=1))
        staged_report.replace(report_path)
    return report


def _passes(
    run: _Run,
    corpus: Any,
    skipped: SkipCounter,
    work: Path,
    tag: str,
    stream_hash: RecordsFingerprint | None,
    progress: bool,
) -> tuple[NearDupResult | None, list[tuple[str, str, float]]]:
    """Both passes into ``work/data.jsonl``; a version of 0 rows is refused (``NothingKept``) before it is
    written, and a refused or failed curation leaves no folder it made behind."""
    made = None if work.exists() else _first_missing(work)
    work.mkdir(parents=True, exist_ok=True)
    spill, staged = work / f".stage1-{tag}.jsonl", work / f".data-{tag}.jsonl"
    try:
        near = _first_pass(run, _records(corpus, run.cfg, skipped), spill, stream_hash, progress)
        near_pairs = _second_pass(spill, staged, near, run, run.cfg.max_listed)
        if not run.counts.get("output"):  # a 0-row version would reach the next step as a dataset
            run.counts["skipped_bad"] = skipped.count
            raise NothingKept(source_where(corpus), _report(run, "", near, near_pairs, skipped))
        staged.replace(work / "data.jsonl")
    except BaseException:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise
    finally:
        spill.unlink(missing_ok=True)
        staged.unlink(missing_ok=True)
    return near, near_pairs


def _first_missing(folder: Path) -> Path:
    """The outermost folder of ``folder``'s path that does not exist yet (what making it creates)."""
    missing = folder
    while not missing.parent.exists():
        missing = missing.parent
    return missing


def _records(corpus: Any, config: CurationConfig, skipped: SkipCounter) -> Iterator[dict]:
    """The corpus read as the config says, its unreadable records counted in ``skipped``."""
    return iter_records(
        corpus,
        text_field=config.text_field,
        skip_bad=config.skip_bad,
        skipped=skipped,
        txt_mode=config.txt_mode,
        streaming=config.streaming,
    )


def _reused(recorded: Recorded, key: str) -> CurationReport | None:
    """The report of the version ``key`` when its caller recorded it and its files are intact."""
    node = intact(recorded(key))
    if node is not None and Path(node.get("report", "")).is_file():
        report = CurationReport.model_validate_json(Path(node["report"]).read_text())
        return report.model_copy(update={"reused": True})
    return None


def _first_pass(
    run: _Run, records: Iterator[dict], spill: Path, stream_hash: RecordsFingerprint | None, progress: bool
) -> NearDupResult | None:
    """Exact dedup, quality and decontamination batch by batch, the survivors spilled to ``spill``
    (byte offsets kept) while their LSH band keys are indexed; then the near-duplicate candidate
    pairs verified from the spill (None without near-dup dedup)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    offsets = array("q")
    console = Console(stderr=True)  # stdout stays machine-readable
    bar = Progress(  # a live bar on a terminal only: piped, its last frame (a spinner glyph) would be noise
        SpinnerColumn(),
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("kept {task.fields[kept]}"),
        TimeElapsedColumn(),
        disable=not (progress and console.is_terminal),
        transient=False,
        console=console,
    )
    with bar, spill.open("wb") as out:
        task = bar.add_task("curating: dedup, quality, decontamination", total=None, kept=0)
        pos = 0
        for batch in _batches(records, run.cfg.batch_size):
            run.counts["input"] += len(batch)
            if stream_hash is not None:
                stream_hash.update(batch)
            kept, kept_words = run.stage_one(batch)
            lines = [json.dumps(r, ensure_ascii=False).encode("utf-8") + b"\n" for r in kept]
            for line in lines:
                offsets.append(pos)
                pos += len(line)
            out.write(b"".join(lines))
            if run.lsh is not None and kept:
                run.lsh.add_words(kept_words)
            bar.update(task, advance=len(batch), kept=len(offsets))
        near = None
        if run.lsh is not None:
            out.flush()
            bar.update(task, description="near-duplicates: verifying candidate pairs")
            near = _verify_from_spill(run.lsh, spill, offsets)
        bar.update(task, description="curated")
    return near


def _report(
    run: _Run, version: str, near: NearDupResult | None, near_pairs: list[tuple[str, str, float]], skipped: SkipCounter
) -> CurationReport:
    """What the chain kept, dropped and found, by stage."""
    return CurationReport(
        version=version,
        counts=run.counts,
        quality_dropped=dict(run.quality.dropped) if run.quality else {},
        quality_examples={k: v for k, v in run.quality.examples.items() if v} if run.quality else {},
        row_dropped=dict(run.rows.dropped) if run.rows else {},
        row_examples={k: v for k, v in run.rows.examples.items() if v} if run.rows else {},
        leaked_eval_examples={k: sorted(v) for k, v in sorted(run.leaked.items())},
        leak_dropped_ids=run.leak_dropped,
        leak_cut_ids=run.leak_cut,
        exact_duplicates=run.exact_pairs,
        near_duplicates=near_pairs,
        lsh={
            "bands": run.lsh.bands,
            "rows": run.lsh.rows,
            "candidates": near.candidates,
            "verified_pairs": len(near.pairs),
        }
        if run.lsh is not None and near is not None
        else {},
        injected=run.injected,
        skipped_examples=skipped.examples,
        unchecked_eval_examples=run.index.unchecked if run.index else [],
    )


def _key(corpus_fp: str, eval_fps: Mapping[str, str], params: Mapping[str, Any]) -> str:
    return version_key("curated", {"corpus": corpus_fp, **{f"eval:{n}": f for n, f in eval_fps.items()}}, params)


def planned_version(
    corpus: Any, eval_sets: Mapping[str, Any] | None = None, config: CurationConfig | None = None, tokenizer: Any = None
) -> str | None:
    """The version ``curate`` will produce, known before any work when the corpus can be
    fingerprinted up front (files, lists, saved datasets); None for one-shot streams."""
    config = config or CurationConfig()
    fp = source_fingerprint(corpus)
    if fp is None:
        return None
    evals = load_eval_sets(eval_sets)
    return _key(fp, {n: records_fingerprint(e) for n, e in evals.items()}, version_params(config, tokenizer))


def version_params(config: CurationConfig, tokenizer: Any = None) -> dict[str, Any]:
    """What of the settings determines the output: the config less ``max_drop_fraction`` (when to
    ask a person), plus the tokenizer's fingerprint when over-length rows are counted with it."""
    params = config.model_dump(mode="json", exclude={"max_drop_fraction"})
    if config.rows is not None and config.rows.max_tokens is not None and tokenizer is not None:
        params["tokenizer"] = tokenizer_fingerprint(tokenizer)
    return params


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """BLAKE2b-128 of what makes a tokenizer count as it does: its vocabulary and rules (a fast
    tokenizer's serialized state), special tokens and chat template."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    state = backend.to_str() if backend is not None else json.dumps(sorted(tokenizer.get_vocab().items()))
    extra = json.dumps(
        [tokenizer.bos_token, tokenizer.eos_token, getattr(tokenizer, "chat_template", None)], default=str
    )
    return hashlib.blake2b((state + extra).encode(), digest_size=16).hexdigest()


def _second_pass(
    spill: Path, final: Path, near: NearDupResult | None, run: _Run, listed: int
) -> list[tuple[str, str, float]]:
    """Copy the survivors of near-dup removal from the spill to the output."""
    if near is None:
        spill.replace(final)
        run.counts["output"] = sum(1 for _ in final.open("rb"))
        return []
    drop = near.survivor_of
    pair_sim = {(i, j): s for i, j, s in near.pairs}
    best: dict[int, float] = {}  # a dropped doc's highest verified similarity, if not paired with its survivor
    for i, j, s in near.pairs:
        for x in (i, j):
            best[x] = max(best.get(x, 0.0), s)
    keep_ids = set(drop.values())
    ids: dict[int, str] = {}
    dropped: list[int] = []
    with spill.open("rb") as src, final.open("wb") as dst:
        for i, line in enumerate(src):
            if i in drop:
                rec = json.loads(line)
                ids[i] = rec["id"]
                dropped.append(i)
                run.counts["near_duplicates"] += 1
                run._caught(rec)
                continue
            if i in keep_ids:
                ids[i] = json.loads(line)["id"]
            dst.write(line)
            run.counts["output"] += 1
    pairs = []
    for i in dropped[:listed]:
        keep = drop[i]
        s = pair_sim.get((min(i, keep), max(i, keep)), best.get(i, 0.0))
        pairs.append((ids[i], ids[keep], round(s, 4)))
    return pairs
