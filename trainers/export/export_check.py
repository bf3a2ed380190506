"""An export read back before it is called done: its answers, its tokenizer and its stops against the registered model.

The exported model is loaded the way its users will load it in Python — a GGUF file by transformers' own GGUF
reader (dequantized), a folder by ``from_pretrained`` — with the tokenizer and chat template it carries, not the
registered ones. Then, on the held-out rows of the run that made the model (``CheckRows``):

- greedy answers of both models, at the answer length the model was judged at, scored by the metric the rows'
  style calls for (exact match for one-right-string answers, ROUGE-L for free-form ones: ``answer_style``);
  the two scores may differ by at most ``SCORE_TOLERANCE``;
- every prompt and reference tokenized by both tokenizers: the ids must be identical, and the exported
  tokenizer must decode them back to the same text;
- every exported answer must stop at end-of-turn within the answer length wherever the registered one does.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from trainteam.curation.answers import AnswerSpec
from trainteam.curation.formats import example, prompt_format, prompt_ids, query
from trainteam.trainers.evaluation.answer_style import answer_style
from trainteam.trainers.evaluation.battery import greedy_generations
from trainteam.trainers.evaluation.metrics.metric_registry import get_metric
from trainteam.trainers.evaluation.metrics.metric_spec import AnswerRows
from trainteam.trainers.training.models import load_model
from trainteam.trainers.training.tokenizer import load_tokenizer

SCORE_TOLERANCE = 0.02
CHECK_BATCH = 64  # the battery's batch: the held-out rows in one or two batches
Progress = Callable[[str], None]


class CheckRows(BaseModel):
    """The rows an export is checked on, where they come from, and how their answers are judged."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    rows: list[dict[str, Any]] = Field(min_length=1)
    source: str = Field(description="e.g. 'the sealed test and dev rows of run r-1a2b (60)'")
    answer: AnswerSpec
    answer_tokens: int = Field(ge=1, le=4096)


class AnswerCheck(BaseModel):
    """Both models' answers on the rows, scored alike, and whether the exported one stops."""

    metric: str
    registered: float
    exported: float
    tolerance: float = SCORE_TOLERANCE
    rows: int
    same_answers: int
    stops_registered: int
    stops_exported: int

    @property
    def ok(self) -> bool:
        return abs(self.exported - self.registered) <= self.tolerance and self.stops_exported >= self.stops_registered


class TokenizerCheck(BaseModel):
    texts: int
    identical_ids: int
    round_trips: int
    first_difference: str | None = None

    @property
    def ok(self) -> bool:
        return self.identical_ids == self.texts and self.round_trips == self.texts


class ExportCheck(BaseModel):
    """What reading an export back found; ``failures`` is empty when it holds."""

    rows_source: str
    answers: AnswerCheck
    tokenizer: TokenizerCheck
    template: str | None = Field(default=None, description="the Ollama template's check, where there is one")
    seconds: float = 0.0

    def failures(self) -> list[str]:
        out: list[str] = []
        a, t = self.answers, self.tokenizer
        if abs(a.exported - a.registered) > a.tolerance:
            out.append(
                f"{a.metric} {a.exported:.4g} exported vs {a.registered:.4g} registered (tolerance {a.tolerance})"
            )
        if a.stops_exported < a.stops_registered:
            out.append(f"{a.stops_exported}/{a.rows} answers stop at end-of-turn (registered {a.stops_registered})")
        if not t.ok:
            out.append(
                f"tokenizer: {t.identical_ids}/{t.texts} identical ids, {t.round_trips}/{t.texts} round trips"
                + (f" (first: {t.first_difference})" if t.first_difference else "")
            )
        return out

    def line(self) -> str:
        a, t = self.answers, self.tokenizer
        return (
            f"{a.metric} {a.exported:.4g} exported vs {a.registered:.4g} registered on {a.rows} rows "
            f"(tolerance {a.tolerance}; {a.same_answers}/{a.rows} answers identical); "
            f"stops at end-of-turn {a.stops_exported}/{a.rows} (registered {a.stops_registered}); "
            f"tokenizer ids identical {t.identical_ids}/{t.texts}, round trips {t.round_trips}/{t.texts}"
            + (f"; {self.template}" if self.template else "")
        )


def judged_metric(rows: CheckRows) -> str:
    """The registry's metric for the rows' answers: exact match, or ROUGE-L where they are free-form."""
    return "rouge_l" if answer_style(rows.rows, rows.answer).free_form else "exact_match"


def answer_scores(rows: CheckRows, texts: list[str], metric: str) -> float:
    """The mean score of ``texts`` as answers to ``rows`` by ``metric`` (exact match by the task's answer rule)."""
    pairs = [example(r) for r in rows.rows]
    if metric == "exact_match":
        return sum(rows.answer.is_correct(t, ref) for t, (_, ref) in zip(texts, pairs, strict=True)) / len(pairs)
    spec = get_metric(metric)
    assert spec.score is not None
    return spec.score(texts, AnswerRows.of(pairs)).mean


def compare_answers(
    rows: CheckRows, registered: tuple[Any, Any], exported: tuple[Any, Any], progress: Progress
) -> AnswerCheck:
    """Greedy answers of both ``(model, tokenizer)`` pairs on ``rows``, scored alike."""
    prompts = [query(r) for r in rows.rows]
    metric = judged_metric(rows)
    gens = {}
    for side, (model, tokenizer) in (("registered", registered), ("exported", exported)):
        progress(f"  answering {len(prompts)} held-out rows with the {side} model")
        gens[side] = greedy_generations(
            model, tokenizer, prompts, max_new_tokens=rows.answer_tokens, batch_size=CHECK_BATCH, what="export check"
        )
    reg, exp = gens["registered"], gens["exported"]
    return AnswerCheck(
        metric=metric,
        registered=answer_scores(rows, [g["text"] for g in reg], metric),
        exported=answer_scores(rows, [g["text"] for g in exp], metric),
        rows=len(prompts),
        same_answers=sum(a["text"] == b["text"] for a, b in zip(reg, exp, strict=True)),
        stops_registered=sum(bool(g["eos"]) for g in reg),
        stops_exported=sum(bool(g["eos"]) for g in exp),
    )


def compare_tokenizers(rows: CheckRows, registered: Any, exported: Any) -> TokenizerCheck:
    """Each row's rendered prompt and reference through both tokenizers: identical ids, and a lossless round trip."""
    fmt = prompt_format(registered)
    same = trips = 0
    first: str | None = None
    for i, row in enumerate(rows.rows):
        prompt, reference = example(row)
        a = prompt_ids(registered, query(row), fmt) + registered.encode(reference, add_special_tokens=False)
        b = prompt_ids(exported, query(row), fmt) + exported.encode(reference, add_special_tokens=False)
        same += a == b
        text = registered.decode(a)
        trips += exported.decode(b) == text
        if first is None and (a != b or exported.decode(b) != text):
            first = f"row {i}: {len(a)} vs {len(b)} ids"
    return TokenizerCheck(texts=len(rows.rows), identical_ids=same, round_trips=trips, first_difference=first)


def load_exported(path: Path) -> tuple[Any, Any]:
    """The exported model and tokenizer as transformers reads them: a GGUF file dequantized, or a folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if path.is_file():
        folder, name = path.parent, path.name
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def check_export(registered_folder: Path, exported: Path, rows: CheckRows, progress: Progress) -> ExportCheck:
    """Read ``exported`` (a .gguf file or a folder) back and compare it with ``registered_folder``; see the module."""
    import time

    started = time.monotonic()
    progress(f"  reading back {exported.name} with transformers")
    exp = load_exported(exported)
    reg = (load_model(registered_folder), load_tokenizer(registered_folder))
    answers = compare_answers(rows, reg, exp, progress)
    tokens = compare_tokenizers(rows, reg[1], exp[1])
    return ExportCheck(
        rows_source=rows.source, answers=answers, tokenizer=tokens, seconds=round(time.monotonic() - started, 1)
    )
