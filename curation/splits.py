"""Where a dataset's training rows and held-out rows come from.

``plan_splits`` decides, in this order: a held-out source given apart (``eval_path``, its
``eval_split`` or, when it has splits, its validation, else test split); a split of the
training source named for it (``eval_split``); the training source's own validation, else
test split (a DatasetDict or a folder with ``test.*`` files); else nothing, and the caller
holds out a seeded share of the training rows (``held_out``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from trainteam.core.errors import BadInput
from trainteam.curation.sources import canonical_split, pick_split, split_names

R = TypeVar("R", bound=Mapping[str, Any])  # a row: a dict read from JSONL, or any mapping

HELD_OUT_MAX = 500  # rows held out of a training source at most: exact match generates for each
EVAL_SPLITS = ("validation", "test")


@dataclass(frozen=True)
class Part:
    """One split of one source (``split`` None: the source is one split)."""

    path: Path
    split: str | None = None

    def __str__(self) -> str:
        return f"{self.path} (split {self.split})" if self.split else str(self.path)


@dataclass(frozen=True)
class SplitPlan:
    train: Part
    eval: Part | None  # None: held out of the training rows


def plan_splits(
    path: Path, eval_path: Path | None = None, *, split: str | None = None, eval_split: str | None = None
) -> SplitPlan:
    """The training part and the held-out part of a dataset (see the module's docstring)."""
    splits = split_names(path)
    train_split = pick_split(split, splits, path) if splits else split
    train = Part(Path(path), train_split)
    ev: Part | None
    if eval_path is not None:
        ev = Part(
            Path(eval_path), eval_split if eval_split is not None else _eval_split(split_names(eval_path), eval_path)
        )
    elif eval_split is not None:
        ev = Part(Path(path), pick_split(eval_split, splits, path) if splits else eval_split)
    else:
        others = [s for s in splits if canonical_split(s) != canonical_split(train_split or "train")]
        found = next((s for want in EVAL_SPLITS for s in others if canonical_split(s) == want), None)
        ev = Part(Path(path), found) if found is not None else None
    if (
        ev is not None
        and ev.path == train.path
        and canonical_split(ev.split or "train") == canonical_split(train.split or "train")
    ):
        raise BadInput(f"{path}: the held-out rows would be the training split ({train.split or 'train'})")
    return SplitPlan(train, ev)


def _eval_split(splits: list[str], where: Path) -> str | None:
    """The split of a held-out source: its validation, else test split, else its only one."""
    if not splits:
        return None
    found = next((s for want in EVAL_SPLITS for s in splits if canonical_split(s) == want), None)
    if found is None and len(splits) != 1:
        raise BadInput(
            f"{where}: has splits {', '.join(splits)} and none is validation or test; name the one to hold out"
        )
    return found or splits[0]


def held_out(n: int, fraction: float, seed: int, most: int = HELD_OUT_MAX) -> frozenset[int]:
    """Indices of the rows to hold out of ``n``: ``fraction`` of them (at least 1, at most ``most``,
    and never all), drawn with ``seed``; the same inputs give the same rows."""
    if n < 2:
        raise BadInput(f"{n} row{'s' if n != 1 else ''}: too few to hold any out for evaluation")
    k = min(most, max(1, round(n * fraction)), n - 1)
    return frozenset(random.Random(seed).sample(range(n), k))


def held_out_groups(keys: Iterable[str], fraction: float, seed: int, where: str = "rows") -> frozenset[str]:
    """The groups to hold out (e.g. runs): ``fraction`` of the distinct ``keys`` (at least 1, never
    all), drawn with ``seed``; every row of a chosen group is held out, so no group is on both sides."""
    groups = sorted(set(keys))
    if len(groups) < 2:
        raise BadInput(
            f"{where}: {len(groups)} group{'s' if len(groups) != 1 else ''} ({', '.join(groups)}): "
            "too few to hold one out with none of its rows in training"
        )
    k = min(max(1, round(len(groups) * fraction)), len(groups) - 1)
    return frozenset(random.Random(seed).sample(groups, k))


def split_by_group(
    rows: Sequence[R], by: str, fraction: float, seed: int, where: str = "rows"
) -> tuple[list[R], list[R]]:
    """``(training rows, held-out rows)``: whole groups of rows (same ``by`` field) held out."""
    missing = next((k for k, r in enumerate(rows) if not isinstance(r.get(by), str) or not r[by]), None)
    if missing is not None:
        raise BadInput(f"{where}: row {missing + 1} has no {by!r} to split by")
    held = held_out_groups((r[by] for r in rows), fraction, seed, where)
    return [r for r in rows if r[by] not in held], [r for r in rows if r[by] in held]


SEALED_MIN_ROWS = 30  # fewer held-out rows: no test part (each part would be too small to mean anything)
SEALED_SHARE = 1 / 3  # of the held-out rows, sealed as the test part
SEALED_MAX = 200  # test rows at most: it is scored once, but every row is a greedy generation


@dataclass(frozen=True)
class SealedSplit:
    """The held-out rows cut in two: ``dev`` (what gates, the judge, the search and retries read) and ``test``
    (sealed: scored once at the end, read by no deciding step), with how the cut was sized."""

    dev: tuple[int, ...]
    test: tuple[int, ...]
    why: str


def seal_test(n: int, seed: int) -> SealedSplit:
    """A seeded third of ``n`` held-out rows (at most ``SEALED_MAX``) as the sealed test part, the rest dev;
    under ``SEALED_MIN_ROWS`` rows nothing is sealed and the reason says so. The noise each part carries is
    stated in rows: a rate measured on k rows moves by 2 standard errors, at most 1/sqrt(k) (at 50 %)."""
    if n < SEALED_MIN_ROWS:
        return SealedSplit(
            tuple(range(n)),
            (),
            f"{n} held-out rows: too few to seal a test part (at least {SEALED_MIN_ROWS}); "
            "every figure is on the rows the gates read",
        )
    k = min(SEALED_MAX, round(n * SEALED_SHARE))
    test = frozenset(random.Random(f"sealed-test-{seed}").sample(range(n), k))
    dev = tuple(i for i in range(n) if i not in test)
    why = (
        f"{n} held-out rows: {len(dev)} dev (gates, search, judge; a rate's noise up to "
        f"±{1 / len(dev) ** 0.5:.2f}), {k} sealed test (scored once at the end; up to ±{1 / k**0.5:.2f}), "
        f"a seeded third (seed {seed})"
    )
    return SealedSplit(dev, tuple(sorted(test)), why)
