"""Adapter merging (TIES and friends) through PEFT's ``add_weighted_adapter``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.trainers.training.models import load_model


def _base_of(adapter: Path) -> Path:
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    base = cfg.get("base_model_name_or_path")
    if not base or not Path(base).is_dir():
        raise BadInput(f"{adapter}: adapter's base model {base!r} is not a local folder; pass base=")
    return Path(base)


def check_adapters(adapters: Sequence[Path], weights: Sequence[float] | None = None) -> list[dict[str, Any]]:
    """The adapters' PEFT configs, once each is an adapter folder, all of one base, with one weight
    each (what a merge needs, checked without loading a model)."""
    if len(adapters) < 2:
        raise BadInput("adapters: TIES merging needs at least two adapters")
    configs = []
    for a in adapters:
        if not (Path(a) / "adapter_config.json").is_file():
            raise BadInput(f"adapters: {a} is not a PEFT adapter folder (no adapter_config.json)")
        configs.append(json.loads((Path(a) / "adapter_config.json").read_text()))
    bases = {str(c.get("base_model_name_or_path")) for c in configs}
    if len(bases) > 1:  # e.g. an align adapter trained on base + SFT beside the SFT adapter itself
        raise BadInput(
            f"adapters: trained on different bases ({', '.join(sorted(bases))}); averaging them "
            "mixes deltas of different models — merge each onto its own base, in order"
        )
    if weights is not None and len(weights) != len(adapters):
        raise BadInput(f"weights: {len(weights)} weights for {len(adapters)} adapters")
    return configs


def merge_adapters(
    adapters: Sequence[Path],
    out_dir: Path,
    *,
    base: Any = None,
    tokenizer=None,
    combination_type: str = "ties",
    weights: Sequence[float] | None = None,
    density: float = 0.5,
) -> Path:
    """Combine LoRA adapters of one base into one, merge it into the base, save a full model.
    Adapters recorded against different bases are refused.

    TIES trims each adapter's delta to its ``density`` largest entries, elects a sign per
    parameter and averages the agreeing entries; the result is a plain safetensors model.
    """
    from peft import PeftModel

    from trainteam.trainers.training.progress import quiet_libraries

    quiet_libraries()
    adapters = [Path(a) for a in adapters]
    check_adapters(adapters, weights)
    if not 0 < density <= 1:
        raise BadInput(f"density: {density} is outside (0, 1]")
    base_model = (
        load_model(_base_of(adapters[0]))
        if base is None
        else (load_model(Path(base)) if isinstance(base, (str, Path)) else base)
    )
    names = [f"a{i}" for i in range(len(adapters))]  # PEFT adapter names must not contain "."
    model = PeftModel.from_pretrained(base_model, str(adapters[0]), adapter_name=names[0], local_files_only=True)
    for name, path in zip(names[1:], adapters[1:], strict=True):
        model.load_adapter(str(path), adapter_name=name, local_files_only=True)
    kw = {"density": density} if "ties" in combination_type or "dare" in combination_type else {}
    model.add_weighted_adapter(
        adapters=names,
        weights=list(weights or [1.0] * len(names)),
        adapter_name="merged",
        combination_type=combination_type,
        **kw,
    )
    model.set_adapter("merged")
    merged = model.merge_and_unload(adapter_names=["merged"])
    merged.requires_grad_(True)  # merge_and_unload freezes every parameter
    out_dir = Path(out_dir)
    merged.save_pretrained(str(out_dir))
    if tokenizer is not None:
        tokenizer.save_pretrained(str(out_dir))
    return out_dir
