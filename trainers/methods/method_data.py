"""Training data in, as a ``datasets.Dataset`` with the columns its method needs.

Every method takes the same three input forms (records, a data file or folder that
``curation.rows`` reads, a ``datasets.Dataset``); the method's own shaping of the rows (its
``shape``) lives in its file under ``trainers/methods/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.curation.rows import read_rows
from trainteam.trainers.methods.base import MIXED, TrainingMethod
from trainteam.trainers.methods.method_registry import get_method


def _dataset(data: Any, name: str):
    from datasets import Dataset

    if isinstance(data, (str, Path)):
        # any file or folder curation.rows reads (JSONL, JSON, CSV, Parquet, a saved dataset), as canonical rows
        records = read_rows(Path(data))
        keys = list(dict.fromkeys(k for r in records for k in r))  # every row's columns (from_list takes the first's)
        return (
            Dataset.from_list([{k: r.get(k) for k in keys} for r in records], on_mixed_types=MIXED) if records else None
        )
    if isinstance(data, Dataset):
        return data
    if isinstance(data, (list, tuple)):
        bad = next((i for i, r in enumerate(data) if not isinstance(r, dict)), None)
        if bad is not None:
            raise BadInput(f"{name}[{bad}]: expected a dict record, got {type(data[bad]).__name__}")
        return Dataset.from_list(list(data), on_mixed_types=MIXED) if data else None
    raise BadInput(f"{name}: expected records, a data file or folder, or a datasets.Dataset, got {type(data).__name__}")


def load_data(data: Any, method: str | TrainingMethod, name: str = "data"):
    """Return a ``datasets.Dataset`` and check that it has the columns ``method`` needs."""
    record = get_method(method) if isinstance(method, str) else method
    if isinstance(data, (str, Path)):
        name = str(data)
    ds = _dataset(data, name)
    if ds is None or len(ds) == 0:
        raise BadInput(f"{name}: no records")
    cols = set(ds.column_names)
    options = record.columns
    if not any(set(opt) <= cols for opt in options):
        want = " or ".join("{" + ", ".join(o) + "}" for o in options)
        raise BadInput(f"{name}: {record.name} needs fields {want}; found {sorted(cols)}")
    return ds
