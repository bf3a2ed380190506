"""How an answer is checked: what a model's answer is, whether it is right, whether it is well-formed,
and what a wrong one looks like. Exact match, format adherence, GRPO's rewards and DPO's rejected
answers all ask an ``AnswerSpec`` (the task's ``answer:``), so they agree on one rule.

Kinds:

- ``exact``: the whole output, normalised, equals the normalised reference. Normalising folds case,
  strips surrounding whitespace and punctuation (quotes, brackets, ``*``/``_``, a closing ``.,;:!?``;
  never a sign, ``$`` or ``%``) and collapses internal whitespace; each can be turned off.
- ``regex``: ``pattern`` is searched in the output (``full_match``: the whole output, surrounding
  whitespace aside, must match); its first group, or the whole match, is the answer. The reference
  goes through the same pattern when it matches (a worked solution ending ``#### 42``), else it is the
  answer as it stands. Answers are compared after the same normalisation as ``exact``.
- ``choice``: ``labels`` (``[A, B, C, D]``, ``[positive, negative]``); the answer is the one label the
  output names (as a word of its own; a longer label naming a shorter one inside it counts as the
  longer). Naming none or several is not well-formed. Inside a longer output, one-letter labels are
  matched in their own case, so the article "a" does not name label ``A``.
- ``verifier``: ``function: "package.module:fn"``, imported when the task is read (the error names
  ``function``), called as ``fn(answer, reference) -> bool | float``; the answer is the stripped output.
  A float is the reward; it counts as correct from ``min_score`` up.

``NUMERIC`` is the bundled demo's rule, unchanged from before answers had kinds: the stripped output
must be one integer (``-?\\d+``, full match), compared as text (``072`` is not ``72``).
"""

from __future__ import annotations

import functools
import importlib
import math
import random
import re
from collections.abc import Callable, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from trainteam.core.errors import BadInput

AnswerKind = Literal["exact", "regex", "choice", "verifier"]
_QUOTES = "\"'`\u201c\u201d\u2018\u2019\u00ab\u00bb"
_LEAD = re.compile(rf"^[\s{re.escape(_QUOTES)}()\[\]{{}}*_]+")
_TRAIL = re.compile(rf"[\s{re.escape(_QUOTES)}()\[\]{{}}*_.,;:!?]+$")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_FUNCTION = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_NORMALISING = ("ignore_case", "strip_surrounding", "collapse_whitespace")


class AnswerSpec(BaseModel):
    """How a task's answers are checked (see the module docstring for each kind)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    kind: AnswerKind = "exact"
    ignore_case: bool = Field(default=True, description="exact/regex/choice: compare case-folded")
    strip_surrounding: bool = Field(
        default=True,
        description="exact/regex/choice: drop surrounding whitespace "
        "and punctuation (quotes, brackets, a closing full stop)",
    )
    collapse_whitespace: bool = Field(
        default=True, description="exact/regex/choice: runs of whitespace count as one space"
    )
    pattern: str | None = Field(
        default=None,
        max_length=500,
        validate_default=True,
        description="regex: searched in the output; its first group (or the match) is the answer",
    )
    full_match: bool = Field(
        default=False, description="regex: the whole output (surrounding whitespace aside) must match"
    )
    labels: list[str] | None = Field(
        default=None, max_length=1000, validate_default=True, description="choice: the labels an output may name"
    )
    function: str | None = Field(
        default=None,
        max_length=300,
        validate_default=True,
        description='verifier: "package.module:fn", fn(answer, reference) -> bool | float',
    )
    min_score: float = Field(
        default=1.0, allow_inf_nan=False, description="verifier: a float at or above this is correct"
    )

    @field_validator("pattern")
    @classmethod
    def _pattern(cls, v: str | None, info: ValidationInfo) -> str | None:
        kind = info.data.get("kind")
        _only(v, kind, "regex", "pattern")
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a regular expression ({exc})") from None
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: list[str] | None, info: ValidationInfo) -> list[str] | None:
        _only(v, info.data.get("kind"), "choice", "labels")
        if v is None:
            return v
        if len(v) < 2:
            raise ValueError("give at least two labels to choose among")
        seen: dict[str, str] = {}
        for label in v:
            key = " ".join(label.split()).casefold()
            if not key:
                raise ValueError("a label is empty")
            if key in seen:
                raise ValueError(f"{seen[key]!r} and {label!r} are the same label")
            seen[key] = label
        return v

    @field_validator("function")
    @classmethod
    def _function(cls, v: str | None, info: ValidationInfo) -> str | None:
        _only(v, info.data.get("kind"), "verifier", "function")
        if v is not None:
            load_verifier(v)  # the task names it: import it now, so a typo fails before a run exists
        return v

    @model_validator(mode="after")
    def _kind_fields(self) -> AnswerSpec:
        if self.full_match and self.kind != "regex":
            raise ValueError(f"full_match: only for kind regex (this answer is kind {self.kind})")
        if self.min_score != 1.0 and self.kind != "verifier":
            raise ValueError(f"min_score: only for kind verifier (this answer is kind {self.kind})")
        if self.kind == "verifier":
            off = [f for f in _NORMALISING if not getattr(self, f)]
            if off:
                raise ValueError(
                    f"{off[0]}: a verifier gets the answer as the model wrote it (stripped); "
                    "normalise inside the function"
                )
        return self

    # -- reading an output ------------------------------------------------------------------

    def normalise(self, text: str, *, fold: bool = True) -> str:
        """The form answers are compared in (the kind's normalisation switches; ``fold=False``: case kept)."""
        t = str(text)
        if self.strip_surrounding:
            t = _TRAIL.sub("", _LEAD.sub("", t))
        if self.collapse_whitespace:
            t = re.sub(r"\s+", " ", t)
        return t.casefold() if self.ignore_case and fold else t

    def extract(self, output: str) -> str | None:
        """The answer an output gives (as written; compare with ``is_correct``), or None when it
        gives none: empty, no match of the pattern, no single label named."""
        text = str(output)
        if self.kind == "regex":
            return self._match(text)
        if self.kind == "choice":
            return self._label(text)
        if self.kind == "verifier":
            text = text.strip()
        return text if self.normalise(text).strip() else None

    def well_formed(self, output: str) -> bool:
        return self.extract(output) is not None

    def reference_answer(self, reference: str) -> str:
        """The answer a reference stands for: for regex and choice, what the pattern or the one label
        it names gives, when it gives one; else the reference itself."""
        ref = str(reference)
        if self.kind in ("regex", "choice"):
            found = self.extract(ref)
            if found is not None:
                return found
        return ref

    def is_correct(self, output: str, reference: str) -> bool:
        answer = self.extract(output)
        if answer is None:
            return False
        if self.kind == "verifier":
            return self._verify(answer, reference) >= self.min_score
        return self._same(answer, self.reference_answer(reference))

    def score(self, output: str, reference: str) -> float:
        """The reward for an output: the verifier's score, else 1.0 when correct and 0.0 when not."""
        if self.kind != "verifier":
            return 1.0 if self.is_correct(output, reference) else 0.0
        answer = self.extract(output)
        return 0.0 if answer is None else self._verify(answer, reference)

    def check_reference(self, reference: str) -> str | None:
        """Why a reference cannot be matched by any output (None when it can): a choice reference
        that names no single label, an empty one."""
        ref = str(reference)
        if self.kind == "choice" and self._label(ref) is None:
            return f"{ref[:60]!r} names none of the labels {self.labels} (or several)"
        if not self.normalise(self.reference_answer(ref)).strip():
            return "the reference answer is empty"
        return None

    def wrong_answer(self, reference: str, rng: random.Random, pool: Sequence[str] = ()) -> str:
        """An answer that is not correct for ``reference``, for DPO's rejected side. Choice: another
        label; a number: its last digit changed (``072`` → ``073``, as DPO always did); text: another
        row's reference from ``pool``. Last resort: the reference negated (``not ...``)."""
        ref = str(reference).strip()
        candidates: list[str] = []
        if self.kind == "choice":
            right = self.reference_answer(ref)
            candidates = [lab for lab in self.labels or [] if not self._same(lab, right)]
            rng.shuffle(candidates)
        elif _NUMBER.fullmatch(ref):
            candidates = [_change_last_digit(ref)]
        others = list(dict.fromkeys(str(p).strip() for p in pool))
        rng.shuffle(others)
        fallback = f"not {ref}" if ref else "no answer"
        for c in candidates + others + [fallback]:
            if c and not self._same(c, ref) and not self.is_correct(c, ref):
                return c
        return fallback  # a verifier that accepts every candidate: the negation is the best left

    # -- the kinds ----------------------------------------------------------------------------

    def _same(self, a: str, b: str) -> bool:
        return self.normalise(a) == self.normalise(b)

    def _match(self, text: str) -> str | None:
        rx = _compiled(self.pattern or "")
        m = rx.fullmatch(text.strip()) if self.full_match else rx.search(text)
        if m is None:
            return None
        answer = m.group(1) if rx.groups else m.group(0)
        return answer if answer is not None and self.normalise(answer).strip() else None

    def _label(self, text: str) -> str | None:
        whole = self.normalise(text)
        same = [label for label in self.labels or [] if self.normalise(label) == whole]
        if same:  # the output is just a label ("b" names B, in any case)
            return same[0]
        named = self._named(text)
        return named[0] if len(named) == 1 else None

    def _named(self, text: str) -> list[str]:
        """The labels ``text`` names; a match inside a longer label's match belongs to the longer."""
        hay = self.normalise(text, fold=False)
        spans = []
        for label in self.labels or []:
            key = self.normalise(label, fold=False)
            flags = re.IGNORECASE if self.ignore_case and len(key) > 1 else 0  # "a" is no label A
            for m in re.finditer(rf"(?<!\w){re.escape(key)}(?!\w)", hay, flags):
                spans.append((m.start(), m.end(), label))
        named = []
        for s, e, label in spans:
            inside = any(s2 <= s and e <= e2 and e2 - s2 > e - s for s2, e2, other in spans if other != label)
            if not inside and label not in named:
                named.append(label)
        return named

    def _verify(self, answer: str, reference: str) -> float:
        fn = load_verifier(self.function or "")
        try:
            got = fn(answer, str(reference).strip())
        except Exception as exc:
            raise BadInput(
                f"answer.function: {self.function} raised {type(exc).__name__}: {exc} on answer {answer[:60]!r}"
            ) from None
        if isinstance(got, bool):
            return 1.0 if got else 0.0
        if isinstance(got, (int, float)) and math.isfinite(got):
            return float(got)
        raise BadInput(f"answer.function: {self.function} returned {got!r}; it must return a bool or a finite number")


def _only(value: Any, kind: str | None, wanted: str, field: str) -> None:
    if kind is None:  # the kind itself was refused: that error says it
        return
    if kind == wanted and value is None:
        raise ValueError(f"required for kind {wanted}")
    if kind != wanted and value is not None:
        raise ValueError(f"only for kind {wanted} (this answer is kind {kind})")


def _change_last_digit(answer: str) -> str:
    digits = list(answer) or ["0"]
    digits[-1] = str((int(digits[-1]) + 1) % 10) if digits[-1].isdigit() else "0"
    return "".join(digits)


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


@functools.lru_cache(maxsize=64)
def load_verifier(path: str) -> Callable[[str, str], Any]:
    """The function ``package.module:fn`` names (ValueError saying why not, for the task's ``function``)."""
    if not _FUNCTION.match(path):
        raise ValueError(f"{path!r}: give it as package.module:function")
    module, name = path.split(":")
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # the user's module: any error in it means it does not import
        raise ValueError(
            f"{path}: module {module!r} does not import ({type(exc).__name__}: {exc}); "
            "install it, or put its folder on PYTHONPATH"
        ) from None
    fn = getattr(mod, name, None)
    if fn is None:
        raise ValueError(f"{path}: module {module!r} has no {name!r}")
    if not callable(fn):
        raise ValueError(f"{path}: {name!r} is a {type(fn).__name__}, not a function")
    return fn


NUMERIC = AnswerSpec(
    kind="regex",
    pattern=r"-?\d+",
    full_match=True,
    ignore_case=False,
    strip_surrounding=False,
    collapse_whitespace=False,
)


def default_answer(demo: bool) -> AnswerSpec:
    """A task's answer rule when it names none: the demo's numbers, else exact on normalised text."""
    return NUMERIC if demo else AnswerSpec()
