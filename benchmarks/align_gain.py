"""Align gain: how much of SFT's remaining error GRPO removes, on the demo's addition task.

The demo's SFT usually ends at 100 % held-out exact match, which leaves the align stage
nothing to cut. This benchmark measures the align stage where it has work to do: it
trains SFT (the demo's model and recipe) with a checkpoint every ``--every`` steps,
takes the first checkpoint whose held-out exact match lies in [--low, --high] — an
SFT model that is good but not done — and runs the demo's GRPO stage from it. Side by
side, in one run: SFT exact match, GRPO exact match, the share of SFT's errors the
align stage removed (goal >= 0.30), and — the baseline — the same number of further
SFT steps from the same checkpoint, so a gain can be told from "just train longer".

Ends with one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def _em(path: Path, tok, problems) -> float:
    from trainteam.trainers import exact_match

    return exact_match(path, tok, problems, max_new_tokens=5).accuracy


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sft-steps", type=int, default=800)
    ap.add_argument("--every", type=int, default=25)
    ap.add_argument("--low", type=float, default=0.5)
    ap.add_argument("--high", type=float, default=0.97)
    ap.add_argument("--grpo-steps", type=int, default=None, help="default: the demo task's GRPO max_steps")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    from trainteam.contract.train_task import load_task_file
    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
    from trainteam.trainers import TokenizerConfig, build_model, load_tokenizer, train, train_tokenizer
    from trainteam.trainers.training.checkpoints import checkpoint_step, complete_checkpoints

    task = load_task_file(Path(__file__).resolve().parents[1] / "examples" / "tasks" / "addition.yaml")
    train_recs, eval_recs = generate_arithmetic(
        ArithmeticConfig(
            n_train=task.data.n_train, n_eval=task.data.n_eval, max_operand=task.data.max_operand, seed=a.seed
        )
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        tok = load_tokenizer(
            train_tokenizer(
                (r["prompt"] + r["completion"] for r in train_recs),
                TokenizerConfig(vocab_size=task.tokenizer.vocab_size),
                work / "tok",
            )
        )
        model = build_model(task.model, tok, seed=a.seed)
        sft_cfg = task.train_config("sft").model_copy(
            update={
                "output_dir": work / "sft",
                "max_steps": a.sft_steps,
                "save_steps": a.every,
                "save_total_limit": 10_000,
                "resume": "never",
                "seed": a.seed,
            }
        )
        t0 = time.time()
        train("sft", sft_cfg, model, train_recs, tokenizer=tok, progress=False)
        sft_s = time.time() - t0
        curve, start = [], None
        for ckpt in complete_checkpoints(work / "sft"):
            em = _em(ckpt, tok, eval_recs)
            curve.append((checkpoint_step(ckpt), em))
            print(f"  sft step {checkpoint_step(ckpt):5d}: exact match {em:.3f}", flush=True)
            if a.low <= em <= a.high:
                start = (ckpt, em)
                break
        result: dict = {"sft_curve": curve, "sft_s": round(sft_s, 1), "seed": a.seed}
        if start is None:
            result["note"] = f"no SFT checkpoint landed in [{a.low}, {a.high}]: nothing to measure the align stage on"
            print("RESULT " + json.dumps(result))
            return
        ckpt, sft_em = start
        a.grpo_steps = a.grpo_steps or task.train_config("grpo").max_steps
        grpo_cfg = task.train_config("grpo").model_copy(
            update={
                "output_dir": work / "grpo",
                "max_steps": a.grpo_steps,
                "save_steps": None,
                "resume": "never",
                "seed": a.seed,
            }
        )
        t0 = time.time()
        rep = train("grpo", grpo_cfg, ckpt, train_recs, tokenizer=tok, progress=False)
        grpo_s = time.time() - t0
        grpo_em = _em(rep.final_dir, tok, eval_recs)
        # Baseline: the same step count of plain SFT from the same checkpoint, at SFT's learning rate.
        more_cfg = sft_cfg.model_copy(
            update={"output_dir": work / "more", "max_steps": a.grpo_steps, "save_steps": None, "warmup_steps": 0}
        )
        more = train("sft", more_cfg, ckpt, train_recs, tokenizer=tok, progress=False)
        more_em = _em(more.final_dir, tok, eval_recs)

    def cut(after: float) -> float:
        return round((after - sft_em) / (1 - sft_em), 3) if sft_em < 1 else 0.0

    result.update(
        {
            "start_checkpoint_step": checkpoint_step(ckpt),
            "sft_exact_match": sft_em,
            "grpo_exact_match": grpo_em,
            "grpo_error_cut": cut(grpo_em),
            "grpo_s": round(grpo_s, 1),
            "more_sft_exact_match": more_em,
            "more_sft_error_cut": cut(more_em),
        }
    )
    print(
        f"SFT {sft_em:.3f} -> GRPO {grpo_em:.3f}: {result['grpo_error_cut']:.0%} of the remaining error removed "
        f"(goal >= 30 %); {a.grpo_steps} more SFT steps instead: {more_em:.3f} ({result['more_sft_error_cut']:.0%})"
    )
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
