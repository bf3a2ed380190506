"""The demo arithmetic data other components train and evaluate on."""

import json

import pytest
from pydantic import ValidationError

from trainteam.core.errors import BadInput
from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic, read_jsonl, write_jsonl


@pytest.mark.parametrize("task,op", [("addition", "+"), ("subtraction", "-"), ("multiplication", "*")])
def test_records_are_correct_and_eval_is_disjoint(task, op):
    train, ev = generate_arithmetic(ArithmeticConfig(task=task, n_train=3000, n_eval=150, max_operand=60))
    assert len(train) == 3000 and len(ev) == 150
    for rec in train + ev:
        assert set(rec) == {"id", "prompt", "completion", "task"}
        assert rec["task"] == task and " " not in rec["prompt"] and rec["prompt"].endswith("=")
        a, b = rec["prompt"][:-1].split(op)
        assert int(rec["completion"]) == eval(f"{int(a)}{op}{int(b)}")
        assert 0 <= int(a) <= 60 and 0 <= int(b) <= 60
    assert not {r["prompt"] for r in train} & {r["prompt"] for r in ev}
    assert len({r["prompt"] for r in ev}) == 150
    assert len({r["id"] for r in train + ev}) == 3150


def test_deterministic_per_seed():
    cfg = ArithmeticConfig(n_train=200, n_eval=20, seed=3)
    assert generate_arithmetic(cfg) == generate_arithmetic(cfg)
    assert generate_arithmetic(cfg) != generate_arithmetic(cfg.model_copy(update={"seed": 4}))


def test_too_many_eval_problems_is_a_clear_error():
    with pytest.raises(ValidationError, match="n_eval"):
        ArithmeticConfig(max_operand=3, n_eval=100)


def test_jsonl_round_trip_and_file_line_errors(tmp_path):
    train, _ = generate_arithmetic(ArithmeticConfig(n_train=10, n_eval=2))
    path = write_jsonl(train, tmp_path / "sub" / "train.jsonl")
    assert read_jsonl(path) == train
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(train[0]) + "\n\n{not json\n")
    with pytest.raises(BadInput, match=r"bad\.jsonl:3: invalid JSON"):
        read_jsonl(bad)
    bad.write_text("[1, 2]\n")
    with pytest.raises(BadInput, match=r"bad\.jsonl:1: expected a JSON object"):
        read_jsonl(bad)
    with pytest.raises(BadInput, match="no such file"):
        read_jsonl(tmp_path / "missing.jsonl")


def test_the_library_imports_no_torch_transformers_or_trl():
    import subprocess
    import sys

    code = (
        "import sys, trainteam.curation; "
        "print(sorted(m for m in ('torch', 'transformers', 'trl', 'datasets', 'sqlalchemy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_fixed_width_keeps_every_digit_in_its_place():
    """The default writes ``08+64=072``: the tiny demo model learns addition only this way
    within the demo's budget (see the generator's docstring for the measurement)."""
    train, ev = generate_arithmetic(ArithmeticConfig(n_train=500, n_eval=50))
    assert {len(r["prompt"]) for r in train + ev} == {6} and {len(r["completion"]) for r in train + ev} == {3}
    assert any(r["prompt"].startswith("0") for r in train) and any(r["completion"].startswith("0") for r in train)
    mult, _ = generate_arithmetic(ArithmeticConfig(task="multiplication", n_train=200, n_eval=10, max_operand=12))
    assert {len(r["completion"]) for r in mult} == {3}  # 12*12 = 144
    plain, _ = generate_arithmetic(ArithmeticConfig(n_train=500, n_eval=50, fixed_width=False))
    assert not any(r["prompt"].startswith("0") and r["prompt"][1] != "+" for r in plain)
    assert {len(r["completion"]) for r in plain} == {1, 2, 3}
