"""Training datasets built from traces or scored samples (``trainteam curate build``, MCP
``build_training_dataset``): one table of builders, a version named before anything is built
(the plan), and the built version recorded as a DatasetVersion ``derived_from`` its source.

- ``sft``: prompt/completion (or conversational) rows from successful traces;
- ``preference``: chosen/rejected pairs from scored samples, a reward gap of ``min_margin``;
- ``grpo``: one group per prompt with its samples' rewards and advantages.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from trainteam.core.errors import BadInput
from trainteam.curation.builders import build_grpo_groups, build_preference_pairs, build_sft_examples
from trainteam.curation.lineage import materialize, source_fingerprint, version_key
from trainteam.curation.sources import iter_items
from trainteam.graph import KnowledgeGraph
from trainteam.graph.record import recorded_dataset
from trainteam.trainers.methods.grpo import METHOD as GRPO
from trainteam.trainers.training.config import one_of
from trainteam.workflows.steps.curate import record_built

# The grpo kind is the GRPO method's rows: prompts with their reference answers (``build_grpo_groups``).
BUILD_KINDS = ("sft", "preference", GRPO.name)
if TYPE_CHECKING:
    BuildKind = str
else:
    BuildKind = one_of(BUILD_KINDS)


class BuildOptions(BaseModel):
    """What a builder keeps: ``min_reward`` (sft: traces with at least this reward), ``min_margin``
    (preference: the reward gap a pair needs)."""

    model_config = ConfigDict(extra="forbid")
    min_reward: float | None = Field(None, description="sft: keep traces with at least this reward")
    min_margin: float = Field(0.0, description="preference: the reward gap a pair needs")


class BuiltDataset(BaseModel):
    kind: BuildKind
    version: str
    path: Path
    rows: int
    reused: bool
    node_id: str | None = None


def _builder(kind: str, opts: BuildOptions) -> tuple[Callable[[list[dict]], list[dict]], dict[str, Any]]:
    table: dict[str, tuple[Callable[[list[dict]], list[dict]], dict[str, Any]]] = {
        "sft": (partial(build_sft_examples, min_reward=opts.min_reward), {"min_reward": opts.min_reward}),
        "preference": (partial(build_preference_pairs, min_margin=opts.min_margin), {"min_margin": opts.min_margin}),
        GRPO.name: (build_grpo_groups, {}),
    }
    if kind not in table:
        raise BadInput(f"kind: unknown dataset kind {kind!r} ({', '.join(BUILD_KINDS)})")
    return table[kind]


def _rows(src: Path) -> list[dict]:
    """The source's rows through the one reader (an empty file, or a row over the bound, is one line)."""
    return [raw for *_, raw in iter_items(src)]


def _source(source: Path, field: str) -> Path:
    if not source.is_file():
        raise BadInput(f"{field}: {source}: no such file")
    return source


def planned_build(kind: str, source: Path, opts: BuildOptions, field: str = "source") -> str:
    """The version ``build_recorded`` would make (or reuse), without reading a row."""
    _, params = _builder(kind, opts)
    fingerprint = source_fingerprint(_source(source, field))
    if fingerprint is None:  # a file always has one
        raise BadInput(f"{field}: {source}: cannot be fingerprinted")
    return version_key(kind, {"source": fingerprint}, params)


def build_recorded(
    graph: KnowledgeGraph, kind: str, source: Path, opts: BuildOptions, out_dir: Path, field: str = "source"
) -> BuiltDataset:
    """Build (or reuse, when recorded with its file intact) and record the dataset version."""
    fn, params = _builder(kind, opts)
    src = _source(source, field)
    version, path, built = materialize(
        kind, {"source": src}, params, lambda: fn(_rows(src)), out_dir, recorded=partial(recorded_dataset, graph)
    )
    node = record_built(graph, built) if built is not None else None
    rows = sum(1 for _ in path.open("rb"))
    return BuiltDataset(kind=kind, version=version, path=path, rows=rows, reused=built is None, node_id=node)
