"""The registry is the one place a method is declared: every name has its record, the rest of the stack asks it,
and no other product file names a method by its literal (issue 33's acceptance: "grpo" in at most 4 files)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from trainteam.core.errors import BadInput
from trainteam.trainers.evaluation.battery import STAGE_KINDS
from trainteam.trainers.methods.method_registry import METHODS, align_methods, get_method, train_methods
from trainteam.trainers.training.config import TrainConfig
from trainteam.trainers.training.method_names import NAMES

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("trainteam", "trainers", "workflows", "agents", "curation", "graph")


def test_every_name_has_a_record_whose_trl_config_and_trainer_exist():
    assert tuple(METHODS) == NAMES
    for name, method in METHODS.items():
        cls = method.config_class()
        assert cls.__name__.endswith(("Config", "Arguments")), (name, cls)
        assert method.kind in ("train", "align") and method.columns and method.row_kinds
        assert STAGE_KINDS[name] == method.eval_kind  # the battery reads the kind from the record
        if method.kind == "align":
            assert method.eval_kind == "post_train" and method.default_lr is not None
    assert set(train_methods()) | set(align_methods()) == set(NAMES)


def test_an_unknown_method_is_refused_naming_the_known_ones():
    with pytest.raises(BadInput, match=r"method: 'ppo' is not one of " + re.escape(", ".join(NAMES))):
        get_method("ppo")
    with pytest.raises(ValueError, match=r"Input should be 'pretrain', 'sft', .* or '" + NAMES[-1] + "'"):
        TrainConfig(method="ppo")


def test_grpo_is_named_in_at_most_four_product_files():
    literal = re.compile(r"[\"']grpo[\"']")
    files = sorted(str(p.relative_to(ROOT)) for folder in PRODUCT for p in (ROOT / folder).rglob("*.py")
                   if literal.search(p.read_text()))
    assert len(files) <= 4, files
    assert "trainers/methods/grpo.py" in files
