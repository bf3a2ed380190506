"""The precision a checkpoint folder is scored at (``eval.precision``): one setting for the base, every checkpoint of
the run and the sealed test, so that every comparison is like for like. An adapter checkpoint is merged onto its
base first (``load_for_eval``): the adapters and the weights merged from them are then the same numbers, and the
judge's evaluation before the merge step agrees with the final evaluation after it.

``fp32`` (the default) scores the weights as saved. ``bf16`` is a person's choice for speed: measured on this repo's
2-core AVX512-BF16 machine (docs/history.md, "Evaluation in bf16, measured and not the default"), the battery on
60 chat rows with SmolLM2-135M took 24.0 s against fp32's 43.1 s, and the trained reply model's ROUGE-L read 0.673
in both. It is not the default because bf16 answers depend on the batching: on that trained model 4 of 16 greedy
answers changed when decoded one at a time (fp32: none), and the battery's determinism check read 0.5 (fp32: 1.0);
on a CPU without native bf16 it is emulated and slower than fp32.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from trainteam.trainers.training.models import load_model

EvalPrecision = Literal["fp32", "bf16"]


def load_for_eval(path: Path, precision: EvalPrecision) -> Any:
    """The checkpoint at ``path`` (adapters merged onto their base) in ``precision``, in eval mode."""
    import torch

    model = load_model(path)
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    if precision == "bf16":
        model = model.to(torch.bfloat16)
    return model.eval()
