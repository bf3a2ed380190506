"""Bundled demo data: verifiable arithmetic tasks, so accuracy can be measured exactly.

Eval problems are drawn first and excluded from training, so a model that scores
on the eval set did not see those exact problems.
"""

from __future__ import annotations

import random
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainteam.curation.jsonl import read_jsonl, write_jsonl

__all__ = ["ArithmeticConfig", "generate_arithmetic", "read_jsonl", "write_jsonl", "solve"]

_OPS = {"addition": "+", "subtraction": "-", "multiplication": "*"}


class ArithmeticConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: Literal["addition", "subtraction", "multiplication"] = "addition"
    max_operand: int = Field(99, ge=1)
    n_train: int = Field(20000, ge=0)
    n_eval: int = Field(200, ge=0)
    seed: int = 0
    fixed_width: bool = Field(True, description="zero-pad operands and answer to one width: 08+64=072")

    @model_validator(mode="after")
    def _enough_problems(self) -> ArithmeticConfig:
        space = _problem_space(self.task, self.max_operand)
        if self.n_eval > space // 2:
            raise ValueError(
                f"n_eval={self.n_eval} needs more distinct problems than max_operand={self.max_operand} "
                f"allows ({space}); keep n_eval <= {space // 2}"
            )
        return self


def _problem_space(task: str, max_operand: int) -> int:
    n = max_operand + 1
    return n * (n + 1) // 2 if task == "subtraction" else n * n


def _draw(rng: random.Random, task: str, max_operand: int) -> tuple[int, int]:
    a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
    if task == "subtraction" and b > a:  # answers stay non-negative
        a, b = b, a
    return a, b


def solve(task: str, a: int, b: int) -> int:
    if task == "addition":
        return a + b
    if task == "subtraction":
        return a - b
    return a * b


def _widths(task: str, max_operand: int) -> tuple[int, int]:
    """Digits of the widest operand and of the widest answer."""
    biggest = {"addition": 2 * max_operand, "subtraction": max_operand, "multiplication": max_operand**2}[task]
    return len(str(max_operand)), len(str(biggest))


def _record(task: str, split: str, i: int, a: int, b: int, widths: tuple[int, int] = (0, 0)) -> dict:
    """One problem. With widths, every digit keeps its place value at a fixed position
    (``08+64=072``): measured here, a 0.56M-parameter Llama then learned 2-digit addition
    to 100 % held-out exact match in 1,000 steps, where the same run on unpadded text
    (``8+64=72``) stood at 7–84 % after 2,000 steps, depending on the seed and warm-up."""
    w, wa = widths
    return {
        "id": f"{task}-{split}-{i:06d}",
        "prompt": f"{a:0{w}d}{_OPS[task]}{b:0{w}d}=",
        "completion": f"{solve(task, a, b):0{wa}d}",
        "task": task,
    }


def generate_arithmetic(cfg: ArithmeticConfig | None = None) -> tuple[list[dict], list[dict]]:
    """(train, eval) records ``{"id", "prompt": "12+34=", "completion": "046", "task"}`` (fixed width by default).

    Deterministic for a seed. Eval problems are distinct and never appear in train;
    train may repeat a problem when ``n_train`` exceeds the problem space (as sampling
    with replacement does), which is what a real stream of exercises looks like.
    """
    cfg = cfg or ArithmeticConfig()
    rng = random.Random(f"arithmetic:{cfg.task}:{cfg.max_operand}:{cfg.seed}")
    widths = _widths(cfg.task, cfg.max_operand) if cfg.fixed_width else (0, 0)
    held_out: set[tuple[int, int]] = set()
    eval_recs: list[dict] = []
    while len(eval_recs) < cfg.n_eval:
        a, b = _draw(rng, cfg.task, cfg.max_operand)
        if (a, b) in held_out:
            continue
        held_out.add((a, b))
        eval_recs.append(_record(cfg.task, "eval", len(eval_recs), a, b, widths))
    train: list[dict] = []
    while len(train) < cfg.n_train:
        a, b = _draw(rng, cfg.task, cfg.max_operand)
        if (a, b) in held_out:
            continue
        train.append(_record(cfg.task, "train", len(train), a, b, widths))
    return train, eval_recs
