"""A pairwise judge: the eval_judge's model compares the trained and the input model's answers.

``pairwise_judge(prompts, trained, baseline)`` asks the model configured for the ``eval_judge`` persona
(``providers.choose_model``, or the model bound to its role: ``bound_models.active``, as ``decisions.decide``
finds it) which of two answers to a held-out prompt is better, for the first ``n`` prompts, in both orders:
once with the trained model's answer as A and the input model's as B, once swapped. A prompt counts as a win,
a loss or a tie only when both orders agree; when they disagree it is ``split`` and counts as neither, so a
judge that prefers whatever it reads first wins nothing (TRL's ``WinRateCallback`` and Oumi's judges compare
the same way). ``win_rate`` is wins / n.

It is evidence reported beside the metrics, never the only gate: a model judging models is biased in ways a
metric is not. Offline (no provider for the persona and no bound model) it does not run and says so in its
note: no Agent is built and no connection opened.

What is sent is redacted (the prompts, the answers, the references: no secret reaches the provider), each
text cut to ``SHOWN_CHARS``. A provider error, a timeout or an answer that is not a valid ``PairVerdict`` on
a prompt counts the prompt as split (``unanswered``) and is noted once; after ``FAILED_IN_A_ROW`` such
prompts in a row, or once ``TOTAL_TIMEOUT_S`` is spent, the rest are not asked (split too). It never raises
for a provider failure mid-way; a setting that cannot work (an unknown provider, a missing key) or inputs
that do not line up raise ``BadInput``.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, Field, ValidationError

from trainteam.agents.bound_models import active
from trainteam.agents.cards import load_card, render
from trainteam.agents.providers import ModelChoice, build_model, choose_model, provider_errors, provider_failure
from trainteam.contract.redaction import redact_text, secret_values
from trainteam.core.errors import BadInput

log = logging.getLogger("trainteam.pairwise")
MAX_PROMPTS = 200  # n's bound: 2 requests a prompt
CALL_TIMEOUT_S = 60.0  # one verdict: its request and its one retry
TOTAL_TIMEOUT_S = 1800.0  # the whole comparison; prompts not asked by then count as split
FAILED_IN_A_ROW = 3  # prompts without a verdict one after another: the provider is down, the rest are not asked
OUTPUT_RETRIES = 1  # one more answer after a malformed one, then the prompt is split
SHOWN_CHARS = 4000  # each text shown to the judge, at most
EXAMPLES = 3  # prompts kept in the result with both answers and both verdicts
EXAMPLE_CHARS = 300  # each text of an example, at most
REASON_CHARS = 300  # a verdict's reason, at most
REFERENCE_LABEL = "a reference answer (one good wording, not the only one)"
OFF_NOTE = "pairwise judge: off (no provider configured for {persona}; offline runs judge by metrics only)"

Side = Literal["trained", "input", "tie"]
Outcome = Literal["win", "loss", "tie", "split"]
_OUTCOME: dict[str, Outcome] = {"trained": "win", "input": "loss", "tie": "tie"}


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short_reason(value: Any) -> Any:
    """A longer reason is cut, not refused: the verdict is what counts."""
    return _clip(value.strip(), REASON_CHARS) if isinstance(value, str) else value


class PairVerdict(BaseModel):
    """What the judge answers for one prompt shown answers A and B."""

    better: Literal["A", "B", "tie"] = Field(description="the better answer: A, B, or tie when they are equally good")
    reason: Annotated[str, BeforeValidator(_short_reason)] = Field(
        max_length=REASON_CHARS, description="why, in one or two sentences"
    )


class OrderVerdict(BaseModel):
    """One order's verdict mapped back to the models: which answer was shown as A, which was better
    (None: no valid verdict, ``reason`` says why)."""

    a: Literal["trained", "input"]
    better: Side | None = None
    reason: str = ""


class PairExample(BaseModel):
    """One compared prompt as a report shows it: the texts (redacted, cut) and both orders' verdicts."""

    prompt: str
    trained: str
    baseline: str = Field(description="the input model's answer")
    reference: str | None = None
    outcome: Outcome
    orders: list[OrderVerdict]


class PairwiseResult(BaseModel):
    """The comparison, or why it did not run (``note``). Evidence beside the metrics, never the only gate."""

    ran: bool
    note: str = Field(description="one line: why it did not run, or what was compared (and what failed)")
    by: str | None = Field(default=None, description="the model id that judged")
    n: int = Field(default=0, ge=0, description="prompts compared")
    wins: int = Field(default=0, ge=0, description="the trained answer better in both orders")
    losses: int = Field(default=0, ge=0, description="the input answer better in both orders")
    ties: int = Field(default=0, ge=0, description="a tie in both orders")
    split: int = Field(default=0, ge=0, description="the orders disagree (or no valid verdict): neither")
    unanswered: int = Field(default=0, ge=0, description="of split: no valid verdict in some order")
    win_rate: float | None = Field(default=None, description="wins / n")
    examples: list[PairExample] = Field(default_factory=list)

    def line(self) -> str:
        """One line for a report."""
        if not self.ran:
            return self.note
        rate = "n/a" if self.win_rate is None else f"{self.win_rate:.2f}"
        failed = f" ({self.unanswered} without a valid verdict)" if self.unanswered else ""
        return (
            f"pairwise (model {self.by}, {self.n} prompts, both orders): trained better {self.wins}, "
            f"input better {self.losses}, tie {self.ties}, orders disagree {self.split}{failed} → win rate {rate}"
        )


@dataclass
class _Pair:
    """One prompt's texts, redacted and cut, as the judge reads them."""

    prompt: str
    trained: str
    baseline: str
    reference: str | None


@dataclass
class _Judged:
    outcome: Outcome
    orders: list[OrderVerdict]
    error: str | None = None  # why some order has no verdict (one line, redacted)


@dataclass
class _Judge:
    """What asks the model, and how a failure is named."""

    agent: Any
    persona: str
    model: Any
    choice: ModelChoice
    secrets: list[str]
    deadline: float


def configured(persona: str = "eval_judge", environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``persona`` has a model to judge with (a provider, or a bound model): without one the judge is
    off, and a caller need not produce the input model's answers at all."""
    env = dict(os.environ if environ is None else environ)
    bound = active(persona, env)
    return bound is not None or not choose_model(persona, env).offline


def pairwise_judge(
    prompts: Sequence[str],
    trained: Sequence[str],
    baseline: Sequence[str],
    references: Sequence[str] | None = None,
    *,
    n: int = 20,
    persona: str = "eval_judge",
    environ: Mapping[str, str] | None = None,
) -> PairwiseResult:
    """The trained model's answers (``trained``) against the input model's (``baseline``) on the first ``n``
    of ``prompts``, judged by ``persona``'s model in both orders; off, and said so, when it has none."""
    count = _checked(prompts, trained, baseline, references, n)
    env = dict(os.environ if environ is None else environ)
    bound = active(persona, env)  # the persona's role binding its step resolved (agents/bound_models.py)
    choice = bound.choice if bound is not None else choose_model(persona, env)
    if choice.offline:
        return PairwiseResult(ran=False, note=OFF_NOTE.format(persona=persona))
    if count == 0:
        return PairwiseResult(ran=False, note="pairwise judge: no held-out prompts to compare")
    # build_model remembers the key: redaction below masks it wherever it appears
    model = bound.model() if bound is not None else build_model(choice, env)
    by = bound.model_id if bound is not None else choice.model
    secrets = sorted(set(secret_values()) | set(secret_values(env)), key=len, reverse=True)
    pairs = [_pair(i, prompts, trained, baseline, references, secrets) for i in range(count)]
    judge = _Judge(_agent(model, persona), persona, model, choice, secrets, time.monotonic() + TOTAL_TIMEOUT_S)
    # a thread of its own: a caller inside a persona's Agent run cannot nest run_sync (see decisions._answer)
    with ThreadPoolExecutor(1, thread_name_prefix="pairwise") as pool:
        judged = pool.submit(_judge_all, judge, pairs).result()
    result = _result(by, pairs, judged)
    log.info("%s: %s", persona, result.line())
    return result


def _checked(
    prompts: Sequence[str], trained: Sequence[str], baseline: Sequence[str], references: Sequence[str] | None, n: int
) -> int:
    """How many prompts are compared; inputs that do not line up are the caller's error."""
    if isinstance(n, bool) or not 1 <= n <= MAX_PROMPTS:
        raise BadInput(f"pairwise judge: n must be 1..{MAX_PROMPTS}, not {n!r}")
    sizes = {"prompts": len(prompts), "trained": len(trained), "baseline": len(baseline)}
    if references is not None:
        sizes["references"] = len(references)
    if len(set(sizes.values())) > 1:
        raise BadInput(
            f"pairwise judge: one answer per prompt is needed ({', '.join(f'{k} {v}' for k, v in sizes.items())})"
        )
    return min(n, len(prompts))


def _pair(
    i: int,
    prompts: Sequence[str],
    trained: Sequence[str],
    baseline: Sequence[str],
    references: Sequence[str] | None,
    secrets: list[str],
) -> _Pair:
    def shown(text: str) -> str:
        return _clip(redact_text(str(text), secrets), SHOWN_CHARS)

    reference = shown(references[i]) if references is not None else None
    return _Pair(shown(prompts[i]), shown(trained[i]), shown(baseline[i]), reference)


def _agent(model: Any, persona: str) -> Any:
    from pydantic_ai import Agent

    card = load_card(persona)
    return Agent(
        model,
        name=f"{persona}_pairwise",
        output_type=PairVerdict,
        retries=OUTPUT_RETRIES,
        model_settings={"temperature": 0.0},
        instructions=render("pairwise.md.j2", persona=persona, role=card.role, goal=card.goal.strip()),
    )


def _message(pair: _Pair, a: str, b: str) -> str:
    reference = f"{REFERENCE_LABEL[0].upper()}{REFERENCE_LABEL[1:]}:\n<reference>\n{pair.reference}\n</reference>\n\n"
    return (
        f"The prompt:\n<prompt>\n{pair.prompt}\n</prompt>\n\n"
        + (reference if pair.reference is not None else "")
        + f"Answer A:\n<answer_A>\n{a}\n</answer_A>\n\nAnswer B:\n<answer_B>\n{b}\n</answer_B>\n\n"
        "Which answer is better: A, B, or tie?\n"
    )


def _judge_all(judge: _Judge, pairs: list[_Pair]) -> list[_Judged]:
    """Each prompt in order, both orders; after FAILED_IN_A_ROW failures in a row or past the deadline,
    the rest are not asked."""
    judged: list[_Judged] = []
    in_a_row = 0
    for pair in pairs:
        stop = _stop_reason(judge, in_a_row)
        one = _Judged("split", [], stop) if stop else _judge_pair(judge, pair)
        in_a_row = in_a_row + 1 if one.error else 0
        judged.append(one)
    return judged


def _stop_reason(judge: _Judge, in_a_row: int) -> str | None:
    if in_a_row >= FAILED_IN_A_ROW:
        return f"not asked: {FAILED_IN_A_ROW} prompts in a row had no valid verdict"
    if time.monotonic() >= judge.deadline:
        return f"not asked: the comparison's {TOTAL_TIMEOUT_S:g} s were spent"
    return None


def _judge_pair(judge: _Judge, pair: _Pair) -> _Judged:
    """Trained as A, then input as A; a win, loss or tie only when both orders say the same."""
    orders: list[OrderVerdict] = []
    for a_side, a, b in (("trained", pair.trained, pair.baseline), ("input", pair.baseline, pair.trained)):
        verdict, error = _ask(judge, _message(pair, a, b))
        if verdict is None:
            orders.append(OrderVerdict(a=a_side, better=None, reason=error or ""))
            return _Judged("split", orders, error)  # the other order is not asked: the prompt is split anyway
        reason = redact_text(verdict.reason, judge.secrets)  # a model may echo what it should not
        orders.append(OrderVerdict(a=a_side, better=_mapped(verdict.better, a_side), reason=reason))
    first, second = orders[0].better, orders[1].better
    return _Judged(_OUTCOME[first] if first is not None and first == second else "split", orders)


def _mapped(better: str, a_side: str) -> Side:
    """The verdict on A/B as a verdict on the models, given which model's answer was A."""
    if better == "tie":
        return "tie"
    shown_first = better == "A"
    if a_side == "trained":
        return "trained" if shown_first else "input"
    return "input" if shown_first else "trained"


def _ask(judge: _Judge, message: str) -> tuple[PairVerdict | None, str | None]:
    """The model's verdict, or None and why (one line, redacted): a provider error, a timeout, no valid answer."""
    from pydantic_ai.exceptions import AgentRunError

    timeout = max(1.0, min(CALL_TIMEOUT_S, judge.deadline - time.monotonic()))
    try:
        return judge.agent.run_sync(message, timeout=timeout).output, None
    except provider_errors() as exc:
        problem = provider_failure(judge.persona, exc, judge.model, judge.choice)
    except AgentRunError as exc:  # a misbehaving model (UnexpectedModelBehavior), a timeout, a usage limit
        problem = f"{judge.persona}: {judge.choice.describe()}: {_misfit(exc)}"
    return None, redact_text(problem, judge.secrets)


def _misfit(exc: BaseException) -> str:
    cause = exc.__cause__
    if isinstance(cause, ValidationError) and cause.errors():
        first = cause.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "PairVerdict"
        return f"answer is not a valid PairVerdict ({where}: {first['msg']})"
    message = getattr(exc, "message", None) or str(exc) or type(exc).__name__
    return f"no valid PairVerdict answer ({message.splitlines()[0]})"


def _result(by: str, pairs: list[_Pair], judged: list[_Judged]) -> PairwiseResult:
    count = {o: sum(j.outcome == o for j in judged) for o in ("win", "loss", "tie", "split")}
    errors = [j.error for j in judged if j.error]
    note = _note(by, len(pairs), errors)
    examples = [_example(p, j) for p, j in list(zip(pairs, judged, strict=True))[:EXAMPLES]]
    return PairwiseResult(
        ran=True,
        note=note,
        by=by,
        n=len(pairs),
        wins=count["win"],
        losses=count["loss"],
        ties=count["tie"],
        split=count["split"],
        unanswered=len(errors),
        win_rate=count["win"] / len(pairs),
        examples=examples,
    )


def _note(by: str, n: int, errors: list[str]) -> str:
    """What was compared and, once, what failed."""
    note = f"pairwise judge: {by} compared the trained and the input model's answers on {n} held-out prompts"
    note += ", in both orders"
    asked = [e for e in errors if not e.startswith("not asked:")]
    if asked:
        note += f"; {len(asked)} without a valid verdict, counted as split (first: {asked[0]})"
    if len(asked) < len(errors):
        first_stop = next(e for e in errors if e.startswith("not asked:"))
        note += f"; {len(errors) - len(asked)} {first_stop.replace('not asked:', 'not asked, counted as split:')}"
    if errors:
        log.warning("%s", note)
    return note


def _example(pair: _Pair, judged: _Judged) -> PairExample:
    def cut(text: str) -> str:
        return _clip(text, EXAMPLE_CHARS)

    return PairExample(
        prompt=cut(pair.prompt),
        trained=cut(pair.trained),
        baseline=cut(pair.baseline),
        reference=cut(pair.reference) if pair.reference is not None else None,
        outcome=judged.outcome,
        orders=judged.orders,
    )


__all__ = ["OrderVerdict", "PairExample", "PairVerdict", "PairwiseResult", "pairwise_judge"]
