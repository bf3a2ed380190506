"""Evaluation of a model in its exact training context, and the eval battery of a stage.

The two measures everything else builds on live here, once: ``heldout_loss`` (mean
cross-entropy on the answer tokens, as training counts them) and ``greedy_generations``
(greedy answers to ``prompt_text(prompt)``); ``exact_match`` compares those answers to
the references. The battery, what the eval_judge measures before a gate decides, adds
perplexity and reliability checks that accuracy alone hides: answer-format adherence,
determinism across runs with different batching, and the rate of degenerate
repetition. Harness tasks run through ``lm_eval_runner``. Each stage kind has a fixed
default battery; a task may override it per stage.

Eval sets are decontaminated against the training data before anything is
measured, with the data engine's n-gram index (``trainteam.curation.decontam``);
its report (or the one the data engine made when it curated) rides on the result.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainteam.core.errors import BadInput
from trainteam.curation.answers import NUMERIC, AnswerSpec
from trainteam.curation.decontam import DecontamConfig, EvalIndex, eval_text
from trainteam.curation.formats import Prompt, example, example_ids, prompt_format, prompt_ids, query, row_kind
from trainteam.trainers.evaluation.answer_length import MAX_NEW_TOKENS, GenerationBudget, reference_match
from trainteam.trainers.evaluation.answer_style import AnswerStyle, answer_style
from trainteam.trainers.evaluation.lm_eval_runner import run_lm_eval, write_exact_match_task
from trainteam.trainers.evaluation.metrics.metric_registry import METRICS
from trainteam.trainers.evaluation.metrics.metric_spec import AnswerRows, bootstrap_se
from trainteam.trainers.evaluation.precision import EvalPrecision, load_for_eval
from trainteam.trainers.methods.method_registry import methods
from trainteam.trainers.training import budget
from trainteam.trainers.training.models import load_model
from trainteam.trainers.training.results import EvalResult
from trainteam.trainers.training.step_lines import RowLines
from trainteam.trainers.training.tokenizer import load_tokenizer

StageKind = Literal["pretrain", "mid_train", "long_context", "post_train"]
Metric = Literal[
    "heldout_loss",
    "exact_match",
    "format_adherence",
    "determinism",
    "repetition",
    "lm_eval",
    "rouge_l",
    "chrf",
    "form_rate",
    "stop_rate",
]

# Training methods (each its record's ``eval_kind``) and curriculum stage names map onto the four stage kinds.
STAGE_KINDS: dict[str, StageKind] = {
    **{m.name: m.eval_kind for m in methods()},
    "mid_train": "mid_train",
    "midtrain": "mid_train",
    "long_context": "long_context",
    "post_train": "post_train",
}


class BatterySpec(BaseModel):
    """Which checks run, and their settings. Task files give this per stage."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    metrics: list[Metric] = Field(min_length=1)
    max_new_tokens: int = Field(default=8, gt=0, le=MAX_NEW_TOKENS)
    batch_size: int = Field(default=64, gt=0, le=4096)
    limit: int | None = Field(default=None, gt=0, le=10_000_000, description="evaluate at most this many problems")
    reliability_limit: int = Field(default=64, gt=0, le=100_000, description="problems used by the reliability checks")
    repetition_ngram: int = Field(default=3, ge=1, le=64)
    repetition_max_new_tokens: int = Field(default=32, gt=0, le=MAX_NEW_TOKENS)
    degenerate_threshold: float = Field(
        default=0.5, gt=0, le=1, description="repeated n-gram share that counts as degenerate"
    )
    lm_eval_tasks: list[str] = Field(
        default_factory=list, description="harness tasks; empty: exact match as a harness task"
    )
    lm_eval_include: Path | None = Field(default=None, description="folder of local harness task YAML")
    judged_by: list[str] | None = Field(
        default=None,
        description="the metrics that judge the answers (the task's eval.metrics); "
        "default: chosen from the references (answer_style.py)",
    )
    precision: EvalPrecision = Field(
        default="fp32",
        description="the precision a checkpoint folder is scored at (the task's eval.precision; "
        "trainers/evaluation/precision.py)",
    )

    @model_validator(mode="before")
    @classmethod
    def _answer_moved(cls, data: Any) -> Any:
        if isinstance(data, dict) and "answer_pattern" in data:
            raise ValueError(
                "answer_pattern: answers are checked by the task's `answer:` now, for every stage; "
                "write it there, e.g. answer: {kind: regex, pattern: '-?\\d+', full_match: true}"
            )
        return data


DEFAULT_BATTERIES: dict[StageKind, BatterySpec] = {
    "pretrain": BatterySpec(metrics=["heldout_loss", "exact_match", "repetition"]),
    "mid_train": BatterySpec(metrics=["heldout_loss", "exact_match", "format_adherence", "repetition"]),
    "long_context": BatterySpec(metrics=["heldout_loss", "determinism", "repetition"], repetition_max_new_tokens=128),
    "post_train": BatterySpec(metrics=["heldout_loss", "exact_match", "format_adherence", "determinism", "repetition"]),
}


def stage_kind(stage: str) -> StageKind:
    try:
        return STAGE_KINDS[stage]
    except KeyError:
        raise BadInput(f"stage {stage!r}: unknown stage kind (one of {sorted(STAGE_KINDS)})") from None


def default_battery(stage: str) -> BatterySpec:
    return DEFAULT_BATTERIES[stage_kind(stage)].model_copy(deep=True)


class BatteryResult(BaseModel):
    stage: str
    kind: StageKind
    metrics: dict[str, float] = Field(
        description="flat: heldout_loss, perplexity, exact_match, format_adherence, "
        "determinism, repetition_rate, reference_match (the share "
        "of references the answer check scores right when written "
        "exactly: below 1, the check is blind), lm_eval/<task>/<metric>"
    )
    n_eval: int
    details: dict[str, Any] = Field(default_factory=dict)
    decontamination: dict[str, Any] | None = None
    seconds: float
    answers: list[str] = Field(default_factory=list, description="the greedy answers, in row order (answer metrics)")
    generation: GenerationBudget | None = Field(None, description="the answer checks' length (the caller sizes it)")

    @property
    def answer_tokens(self) -> int | None:
        """max_new_tokens of the answer checks (None: not sized by the caller)."""
        return self.generation.tokens if self.generation is not None else None

    @property
    def precision(self) -> str:
        """The precision the battery loaded the weights in (``fp32``, ``bf16``)."""
        return str(self.details.get("precision", ""))

    @property
    def answer_style(self) -> dict[str, Any] | None:
        """The answers' style and the metrics that judge them (``AnswerStyle``'s JSON); None: no answer check."""
        return self.details.get("answers")

    @property
    def samples(self) -> list[dict[str, Any]]:
        """A few of the exact-match check's answers beside their references."""
        return list((self.details.get("exact_match") or {}).get("samples") or [])

    @property
    def misses(self) -> dict[str, Any]:
        """Check name -> the rows it scored wrong (the checks that recorded misses)."""
        return {k: v["misses"] for k, v in self.details.items() if isinstance(v, dict) and v.get("misses")}


# -- individual measures -------------------------------------------------------------------


def heldout_loss(
    model: Any, tokenizer, records: Sequence[dict], *, batch_size: int = 64, completion_only: bool = True
) -> float:
    """Mean token cross-entropy on ``records`` (a model or a checkpoint folder) in the training context.

    Prompt/completion records score the completion tokens only (what SFT trains);
    ``{"text"}`` records, or every record with ``completion_only=False``, score every token.
    """
    for i, r in enumerate(records):
        try:
            row_kind(r)
        except ValueError:
            raise BadInput(f"held-out records[{i}]: needs 'text', 'prompt' and 'completion', or 'messages'") from None
    if not records:
        raise BadInput("held-out records: none to measure loss on")
    if isinstance(model, (str, Path)):
        model = load_model(Path(model))
    model.eval()
    total, count = 0.0, 0
    pad = tokenizer.pad_token_id
    fmt = prompt_format(tokenizer)
    rows = [_labelled_ids(tokenizer, r, fmt, completion_only) for r in records]
    lines = RowLines("evaluation (held-out loss)", len(records))
    for start, end in _loss_batches([len(ids) for ids, _ in rows], batch_size):
        budget.check("evaluation (held-out loss)")
        loss, n = labelled_loss(model, *_right_padded(rows[start:end], pad, model.device))
        total += loss
        count += n
        lines.done(end)
    return total / max(count, 1)


LOSS_TOKENS = 2048  # positions (rows x width) of one held-out loss forward


def _right_padded(part: Sequence[tuple[list[int], list[int]]], pad: int, device: Any) -> tuple[Any, Any, Any]:
    """``(ids, attention mask, labels)`` tensors of ``(ids, labels)`` rows, padded on the right to the longest."""
    import torch

    width = max(len(ids) for ids, _ in part)
    ids_t = torch.tensor([ids + [pad] * (width - len(ids)) for ids, _ in part], device=device)
    mask = torch.tensor([[1] * len(ids) + [0] * (width - len(ids)) for ids, _ in part], device=device)
    labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in part], device=device)
    return ids_t, mask, labels


def _loss_batches(widths: list[int], most: int) -> list[tuple[int, int]]:
    """``(start, end)`` of consecutive rows: at most ``most`` rows and ``LOSS_TOKENS`` padded positions a batch
    (one row at least). On the real SmolLM2, 64 reply rows of ~122 tokens scored in batches of 16 added 0.87 GB
    to the process and took 37 s; in one batch of 64, 1.9 GB and 41 s (benchmarks/heldout_loss_memory.py)."""
    out, start = [], 0
    while start < len(widths):
        end, width = start + 1, widths[start]
        while end < len(widths) and end - start < most and max(width, widths[end]) * (end + 1 - start) <= LOSS_TOKENS:
            width = max(width, widths[end])
            end += 1
        out.append((start, end))
        start = end
    return out


def _labelled_ids(tokenizer: Any, record: dict, fmt: Any, completion_only: bool) -> tuple[list[int], list[int]]:
    """A record's token ids and its labels: the answer's tokens (everything for text, or without
    ``completion_only``), -100 elsewhere."""
    if row_kind(record) == "text":
        ids = tokenizer(record["text"], add_special_tokens=False)["input_ids"]
        n_prompt = 0
    else:
        prompt, ids = example_ids(tokenizer, record, fmt)
        n_prompt = len(prompt) if completion_only else 0
    return list(ids), [-100] * n_prompt + list(ids)[n_prompt:]


# The LM head's output held at once while scoring held-out tokens. cross_entropy holds its log-softmax beside it,
# so a chunk costs twice this: at 256 MiB the reply task's held-out loss raised a whole run's RSS by 790 MiB (the
# run's peak outside training); 32 MiB is 170 positions of SmolLM2's 49k vocabulary, still one large matmul.
LOGITS_BYTES = 32 << 20


def labelled_loss(model: Any, ids: Any, mask: Any, labels: Any) -> tuple[float, int]:
    """``(sum of the cross-entropy of every labelled next token, how many)`` of one batch, with the LM head
    applied only where a label is (an answer's tokens), ``LOGITS_BYTES`` of logits at a time. The full
    ``(rows, width, vocabulary)`` logits of a 64-row batch are the largest tensor of an evaluation: SmolLM2's
    49k vocabulary over 64 rows of 128 tokens is 1.6 GB (twice, with the copy the shift makes), Gemma 3's 262k
    five times that; the answers are a small share of the positions. Same numbers as the full logits (a test);
    a model whose decoder and head cannot be told apart is scored the plain way."""
    import torch

    total, count = 0.0, 0
    for logits, wanted, _rows in _labelled_logits(model, ids, mask, labels):
        total += float(torch.nn.functional.cross_entropy(logits, wanted, reduction="sum"))
        count += int(wanted.numel())
    return total, count


def labelled_argmax_rows(model: Any, ids: Any, mask: Any, labels: Any) -> list[bool]:
    """Per row of one batch: whether the model's most likely next token is the labelled one at every labelled
    position (a row with no label counts as agreeing)."""
    import torch

    agree = torch.ones(ids.shape[0], dtype=torch.bool)
    for logits, wanted, rows in _labelled_logits(model, ids, mask, labels):
        wrong = logits.argmax(dim=-1) != wanted
        agree[rows[wrong].cpu()] = False
    return agree.tolist()


def _labelled_logits(model: Any, ids: Any, mask: Any, labels: Any):
    """``(logits, labelled next tokens, their rows)`` of one batch's labelled positions, ``LOGITS_BYTES`` of
    float32 logits at a time: the LM head applied there only (see ``labelled_loss``)."""
    import torch

    tgt = labels[:, 1:]
    keep = tgt != -100
    rows = torch.arange(ids.shape[0], device=ids.device)[:, None].expand_as(tgt)[keep]
    with torch.no_grad():
        parts = _decoder_and_head(model)
        if parts is None:
            logits = model(input_ids=ids, attention_mask=mask).logits[:, :-1][keep].float()
            yield logits, tgt[keep], rows
            return
        decoder, head, cap = parts
        hidden = decoder(input_ids=ids, attention_mask=mask).last_hidden_state[:, :-1][keep]
        wanted = tgt[keep]
        step = max(1, LOGITS_BYTES // (4 * head.weight.shape[0]))
        for s in range(0, hidden.shape[0], step):
            logits = head(hidden[s : s + step]).float()
            if cap:  # Gemma 2's final soft cap, as its forward applies it
                logits = torch.tanh(logits / cap) * cap
            yield logits, wanted[s : s + step], rows[s : s + step]


def _decoder_and_head(model: Any) -> tuple[Any, Any, float | None] | None:
    """The decoder stack, the LM head and the final logit soft cap of a causal LM, or None where unsure."""
    try:
        decoder, head = model.get_decoder(), model.get_output_embeddings()
    except (AttributeError, NotImplementedError, ValueError):
        return None
    if decoder is None or decoder is model or head is None or not hasattr(head, "weight"):
        return None
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    return decoder, head, getattr(config, "final_logit_softcapping", None)


def greedy_generations(
    model, tokenizer, prompts: Sequence[Prompt], *, max_new_tokens: int, batch_size: int, what: str = "generation"
) -> list[dict]:
    """Greedy continuations of each prompt as ``formats.prompt_ids`` renders it for this tokenizer
    (pass ``formats.query(row)``): ``{"ids"}`` up to (not incl.) EOS, ``{"eos"}`` whether EOS came,
    ``{"text"}`` the decoded answer (special tokens dropped, stripped). ``what`` names the work in
    the message of a budget stop between batches."""
    import torch

    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    eos = tokenizer.eos_token_id
    fmt = prompt_format(tokenizer)
    model.eval()  # dropout on would make "greedy" answers random
    out: list[dict] = []
    lines = RowLines(what, len(prompts))
    try:
        for s in range(0, len(prompts), batch_size):
            budget.check(what)
            ids = [prompt_ids(tokenizer, p, fmt) for p in prompts[s : s + batch_size]]
            enc = tokenizer.pad({"input_ids": ids}, padding=True, return_tensors="pt").to(model.device)
            with torch.no_grad():
                gen = model.generate(
                    **enc,
                    max_new_tokens=max_new_tokens,
                    do_sample=False,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=eos,
                )
            for row in gen[:, enc["input_ids"].shape[1] :].tolist():
                stop = row.index(eos) if eos in row else None
                ids = row[:stop] if stop is not None else row
                out.append(
                    {
                        "ids": ids,
                        "eos": stop is not None,
                        "text": tokenizer.decode(ids, skip_special_tokens=True).strip(),
                    }
                )
            lines.done(len(out))
    finally:
        tokenizer.padding_side = side
    return out


def exact_match(
    model: Any,
    tokenizer,
    problems: list[dict],
    *,
    max_new_tokens: int = 8,
    batch_size: int = 64,
    answer: AnswerSpec = NUMERIC,
) -> EvalResult:
    """Greedy answers to ``prompt_text(prompt)`` (``greedy_generations``), the text before EOS checked against
    the reference by ``answer`` (the task's AnswerSpec; default the demo's numbers)."""
    if isinstance(model, (str, Path)):
        model = load_model(Path(model))
    gens = answers_to(model, tokenizer, problems, max_new_tokens, batch_size, "evaluation (exact match)")
    return scored_exact(problems, gens, answer)


def answers_to(model, tokenizer, problems: list[dict], max_new_tokens: int, batch_size: int, what: str) -> list[dict]:
    """Greedy answers (``greedy_generations``) to pair or chat rows; BadInput naming the first other row."""
    bad = next((i for i, p in enumerate(problems) if _kind(p) not in ("pair", "chat")), None)
    if bad is not None:
        raise BadInput(f"problems[{bad}]: needs fields prompt and completion, or messages ending with an answer")
    prompts = [query(p) for p in problems]
    return greedy_generations(
        model, tokenizer, prompts, max_new_tokens=max_new_tokens, batch_size=batch_size, what=what
    )


def scored_exact(problems: list[dict], gens: Sequence[dict], answer: AnswerSpec) -> EvalResult:
    """Exact match of greedy answers already generated (``greedy_generations``) for ``problems``."""
    samples, correct = [], 0
    for p, g in zip(problems, gens, strict=True):
        prompt, reference = example(p)
        ok = answer.is_correct(g["text"], reference)
        correct += ok
        samples.append({"prompt": prompt, "expected": reference, "got": g["text"], "correct": ok})
    n = len(problems)
    return EvalResult(accuracy=correct / n if n else 0.0, n=n, correct=correct, samples=samples)


def _kind(rec: Any) -> str | None:
    try:
        return row_kind(rec)
    except (ValueError, AttributeError):
        return None


def format_adherence(gens: Sequence[dict], tokenizer, answer: AnswerSpec, max_new_tokens: int) -> dict[str, Any]:
    """Share of answers that end with EOS within the budget and are well-formed (``answer.well_formed``)."""
    ok = 0
    bad: list[str] = []
    for g in gens:
        ids = g["ids"]
        text = tokenizer.decode(ids[:max_new_tokens], skip_special_tokens=True).strip()
        good = g["eos"] and len(ids) < max_new_tokens and answer.well_formed(text)
        ok += good
        if not good and len(bad) < 5:
            bad.append(text)
    return {"format_adherence": ok / len(gens) if gens else 0.0, "format_violations": bad}


def repetition_rate(gens: Sequence[dict], n: int, threshold: float) -> dict[str, Any]:
    """Share of generations whose repeated n-gram fraction exceeds ``threshold`` (loops like "1111…")."""
    fractions = []
    for g in gens:
        ids = g["ids"]
        grams = [tuple(ids[i : i + n]) for i in range(len(ids) - n + 1)]
        fractions.append(1.0 - len(set(grams)) / len(grams) if grams else 0.0)
    degenerate = sum(f > threshold for f in fractions)
    return {
        "repetition_rate": degenerate / len(gens) if gens else 0.0,
        "mean_repeated_ngram_fraction": sum(fractions) / len(fractions) if fractions else 0.0,
    }


def greedy_agreement(model: Any, tokenizer: Any, prompts: Sequence[Prompt], gens: Sequence[dict]) -> float:
    """Share of ``prompts`` whose greedy answers (``gens``, from ``greedy_generations``: generated in left-padded
    batches) greedy decoding gives again in another batch composition — right-padded, in one forward pass.

    Greedy decoding reproduces an answer exactly when, at each of its positions, the model's most likely next
    token given the prompt and the answer so far is the answer's token (and, where the answer stopped, the
    end-of-sequence token after it). One teacher-forced forward over the prompts and their answers reads every
    position at once: the same check as decoding them again in smaller batches, which took 32 s for 16 reply
    answers of 77 tokens on SmolLM2 (4 batches x 77 steps), more than the 60 answers' own generation (29 s)."""
    if not gens:
        return 1.0
    fmt = prompt_format(tokenizer)
    eos = tokenizer.eos_token_id
    rows = []
    for p, g in zip(prompts, gens, strict=True):
        prompt = prompt_ids(tokenizer, p, fmt)
        answer = list(g["ids"]) + ([eos] if g["eos"] else [])
        rows.append((prompt + answer, [-100] * len(prompt) + answer))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    model.eval()
    agree: list[bool] = []
    for start, end in _loss_batches([len(ids) for ids, _ in rows], 32):
        agree += labelled_argmax_rows(model, *_right_padded(rows[start:end], pad, model.device))
    return sum(agree) / len(agree)


# -- decontamination -----------------------------------------------------------------------


def decontaminate(
    eval_records: list[dict], train_records: Sequence[dict] | None, config: Any | None = None
) -> tuple[list[dict], dict[str, Any] | None]:
    """Drop eval examples that occur in the training data (word n-gram overlap, the data
    engine's ``EvalIndex``); returns the clean examples and the report of what was removed."""
    if train_records is None:
        return eval_records, None
    cfg = config or DecontamConfig()
    index = EvalIndex.build({"eval": eval_records}, cfg)
    texts = []
    for i, r in enumerate(train_records):
        try:
            texts.append(eval_text(r))
        except ValueError:
            raise BadInput(f"training records[{i}]: needs 'text' or 'prompt' to check for contamination") from None
    leaked = sorted({o for hits in index.find(texts) for _, _, o in hits})
    clean = [r for k, r in enumerate(eval_records) if k not in set(leaked)]
    return clean, {
        "checked": True,
        "method": f"curation word {cfg.ngram}-gram overlap",
        "eval_examples": len(eval_records),
        "training_records": len(texts),
        "removed": len(leaked),
        "contaminated": [index.names[o] for o in leaked][:50],
        "unchecked_too_short": len(index.unchecked),
    }


# -- the battery ---------------------------------------------------------------------------


def _load(model_or_path, tokenizer, precision: EvalPrecision):
    """The model (a folder is loaded at the battery's precision: ``precision.load_for_eval``), its tokenizer, the
    folder (None for an in-memory model, scored as it is) and the precision it is scored at."""
    if isinstance(model_or_path, (str, Path)):
        path = Path(model_or_path)
        if tokenizer is None:
            tokenizer = path
        return load_for_eval(path, precision), tokenizer, path, precision
    dtype = getattr(model_or_path, "dtype", None)
    return model_or_path, tokenizer, None, "bf16" if str(dtype) == "torch.bfloat16" else "fp32"


def run_battery(
    model_or_path: Any,
    tokenizer: Any,
    eval_records: list[dict],
    *,
    stage: str,
    spec: BatterySpec | None = None,
    heldout_records: list[dict] | None = None,
    train_records: Sequence[dict] | None = None,
    decontamination_report: dict[str, Any] | None = None,
    out_dir: str | Path | None = None,
    answer: AnswerSpec = NUMERIC,
) -> BatteryResult:
    """Run the stage's battery on a model (object or checkpoint folder).

    ``eval_records`` are prompt/completion problems; ``heldout_records`` (default: the same
    problems) feed the loss; ``train_records`` are checked for overlap first unless the
    data engine's ``decontamination_report`` for this eval set is given. ``answer`` (the task's
    AnswerSpec) says which answers are right (exact match) and well-formed (format adherence).
    """
    started = time.monotonic()
    kind = stage_kind(stage)
    spec = spec or default_battery(stage)
    model, tokenizer, ckpt, precision = _load(model_or_path, tokenizer, spec.precision)
    if isinstance(tokenizer, (str, Path)):
        tokenizer = load_tokenizer(Path(tokenizer))
    if tokenizer is None:
        raise BadInput("run_battery: a tokenizer (object or folder) is required with an in-memory model")
    records = list(eval_records)
    report = decontamination_report
    if report is None:
        records, report = decontaminate(records, train_records)
    if spec.limit:
        records = records[: spec.limit]
    if not records and set(spec.metrics) - {"heldout_loss"}:
        raise BadInput(f"battery {stage}: no eval problems left to measure")
    metrics: dict[str, float] = {}
    details: dict[str, Any] = {"precision": precision}

    if "heldout_loss" in spec.metrics:
        loss = heldout_loss(
            model,
            tokenizer,
            heldout_records if heldout_records is not None else records,
            batch_size=min(spec.batch_size, 32),
        )
        metrics.update(heldout_loss=loss, perplexity=math.exp(min(loss, 50.0)))
    style = answers_style(records, spec, answer)
    if style is not None:
        details["answers"] = style.model_dump()
    gens, longer = _answers(model, tokenizer, records, spec, answer, style, metrics, details)
    if ANSWER_CHECKS & set(spec.metrics) and style is not None and style.kind != "text":
        # can the check see a right answer at all?
        metrics["reference_match"], details["reference_misses"] = reference_match(
            tokenizer, records, answer, spec.max_new_tokens
        )
    _reliability(model, tokenizer, records, spec, answer, metrics, details, longer)
    if "lm_eval" in spec.metrics:
        metrics.update(_lm_eval(spec, ckpt, tokenizer, records, stage, out_dir))
    return BatteryResult(
        stage=stage,
        kind=kind,
        metrics=metrics,
        n_eval=len(records),
        details=details,
        decontamination=report,
        seconds=time.monotonic() - started,
        answers=[g["text"] for g in gens],
    )


ANSWER_CHECKS = {"exact_match", "format_adherence", "rouge_l", "chrf", "form_rate", "stop_rate"}
# The determinism check answers this many prompts again in another batching (it reports; it decides nothing): a
# second pass over every held-out row doubled the battery's generation.
DETERMINISM_PROMPTS = 16


def answers_style(records: list[dict], spec: BatterySpec, answer: AnswerSpec) -> AnswerStyle | None:
    """The style of the held-out answers (``answer_style``) when the battery checks answers, else None."""
    if not ANSWER_CHECKS & set(spec.metrics):
        return None
    return answer_style(records, answer, spec.judged_by)


def _answer_metrics(spec: BatterySpec, style: AnswerStyle | None) -> list[str]:
    """The metrics scored from greedy answers: exact match and every registered answer metric the battery
    lists, the style's judges and reported ones (free-form: ROUGE-L, chrF, the form rate, the stop rate)."""
    wanted: list[str] = list(spec.metrics)
    if style is not None and style.kind != "text":
        wanted += style.judged_by + style.reported
    return [m for m in dict.fromkeys(wanted) if m == "exact_match" or m == "stop_rate" or _scored(m)]


def _scored(name: str) -> bool:
    return name in METRICS and METRICS[name].score is not None


def _answers(
    model: Any,
    tokenizer: Any,
    records: list[dict],
    spec: BatterySpec,
    answer: AnswerSpec,
    style: AnswerStyle | None,
    metrics: dict[str, float],
    details: dict[str, Any],
) -> tuple[list[dict], list[dict]]:
    """Greedy answers to every held-out prompt, generated once, scored by each answer metric into ``metrics``
    (a bootstrap metric's standard error beside it as ``<name>_se``) and ``details`` (samples, misses); returns
    the answers at the answer length and the same generation at the reliability checks' length (``generation_budget``;
    none when no answer metric runs). Greedy answers are prefixes of longer ones, so one generation serves both."""
    names = _answer_metrics(spec, style)
    if not names:
        return [], []
    budget = generation_budget(spec)
    longer = answers_to(model, tokenizer, records, budget, spec.batch_size, "evaluation (answers)")
    gens = [cut_answer(g, spec.max_new_tokens, tokenizer) for g in longer]
    if "exact_match" in names:
        em = scored_exact(records, gens, answer)
        metrics["exact_match"] = em.accuracy
        details["exact_match"] = {"n": em.n, "correct": em.correct, "samples": em.samples[:10]}
    if "stop_rate" in names:
        stopped = sum(1 for g in gens if g["eos"] and len(g["ids"]) < spec.max_new_tokens)
        metrics["stop_rate"] = stopped / len(gens)
    texts = [g["text"] for g in gens]
    rows = AnswerRows.of([example(r) for r in records])
    for name in names:
        score = METRICS[name].score if name in METRICS else None
        if score is None:
            continue
        result = score(texts, rows)
        if not result.values:  # nothing this metric can check on these rows (a form rule learnt empty)
            details[name] = {"n": 0, "why": "nothing to check on these references", "rule": result.rule}
            continue
        metrics[name] = result.mean
        if METRICS[name].noise == "bootstrap":
            metrics[f"{name}_se"] = bootstrap_se(result.values)
        details[name] = {"n": len(result.values), "misses": result.misses, "rule": result.rule}
    return gens, longer


def generation_budget(spec: BatterySpec) -> int:
    """The new tokens the battery generates once: the answer length, or the repetition check's when it is longer."""
    checks_repetition = "repetition" in spec.metrics
    return max(spec.max_new_tokens, spec.repetition_max_new_tokens if checks_repetition else 0)


def cut_answer(gen: dict, max_new_tokens: int, tokenizer: Any) -> dict:
    """A longer greedy generation as ``greedy_generations`` at ``max_new_tokens`` gives it: the same tokens up to
    there, EOS only where it came within the length (greedy decoding in the same batch is prefix-stable)."""
    if gen["eos"] and len(gen["ids"]) < max_new_tokens:
        return gen
    ids = gen["ids"][:max_new_tokens]
    return {"ids": ids, "eos": False, "text": tokenizer.decode(ids, skip_special_tokens=True).strip()}


def _reliability(
    model: Any,
    tokenizer: Any,
    records: list[dict],
    spec: BatterySpec,
    answer: AnswerSpec,
    metrics: dict[str, float],
    details: dict[str, Any],
    answered: list[dict] | None = None,
) -> None:
    """Format adherence, repetition and determinism of greedy answers, into ``metrics`` and ``details``; the
    answers already generated at the same length (``answered``) are reused rather than generated again."""
    reliability = {"format_adherence", "determinism", "repetition"} & set(spec.metrics)
    if not reliability:
        return
    prompts = [query(r) for r in records[: spec.reliability_limit]]
    budget = generation_budget(spec)
    if answered and len(answered) >= len(prompts):
        first = answered[: len(prompts)]
    else:
        first = greedy_generations(model, tokenizer, prompts, max_new_tokens=budget, batch_size=spec.batch_size)
    if "format_adherence" in reliability:
        fa = format_adherence(first, tokenizer, answer, spec.max_new_tokens)
        metrics["format_adherence"] = fa["format_adherence"]
        details["format_violations"] = fa["format_violations"]
    if "repetition" in reliability:
        rep = repetition_rate(first, spec.repetition_ngram, spec.degenerate_threshold)
        metrics["repetition_rate"] = rep["repetition_rate"]
        details["mean_repeated_ngram_fraction"] = rep["mean_repeated_ngram_fraction"]
    if "determinism" in reliability:
        # Some prompts again in another batch composition (other padding): greedy answers must not change.
        few = prompts[:DETERMINISM_PROMPTS]
        metrics["determinism"] = greedy_agreement(model, tokenizer, few, first[: len(few)])


def _lm_eval(
    spec: BatterySpec, ckpt: Path | None, tokenizer, records: list[dict], stage: str, out_dir: str | Path | None
) -> dict[str, float]:
    if ckpt is None:
        raise BadInput(f"battery {stage}: lm_eval needs a checkpoint folder, not an in-memory model")
    if out_dir is None:
        raise BadInput(f"battery {stage}: lm_eval needs out_dir for its task files and results")
    tasks, include = spec.lm_eval_tasks, spec.lm_eval_include
    if not tasks:
        include = Path(out_dir) / "lm_eval_tasks"
        name = f"{re.sub(r'[^A-Za-z0-9_]', '_', stage)}_exact_match"
        write_exact_match_task(include, name, records, tokenizer, max_new_tokens=spec.max_new_tokens)
        tasks = [name]
    elif include is None:
        raise BadInput(f"battery {stage}: lm_eval_tasks given without lm_eval_include (folder of task YAML)")
    res = run_lm_eval(ckpt, tasks, include_path=include, batch_size=spec.batch_size, out_dir=out_dir)
    return {f"lm_eval/{t}/{m}": v for t, vals in res.tasks.items() for m, v in vals.items()}
