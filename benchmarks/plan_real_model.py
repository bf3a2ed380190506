"""The planner's estimate against a real run of a real model, before and after it counted real tokens.

LoRA SFT (r 8, all-linear, fp32) of SmolLM2-135M-Instruct (the tests' imported fixture; ``--model``
names another local folder) for one epoch over ``--rows`` short instruction rows, once as
prompt/completion rows and once as chat (``messages``) rows, at ``--threads`` torch threads:

- **before**: the planner as it was: a row's tokens bounded by the UTF-8 bytes of its
  ``prompt``/``completion``/``text`` (a chat row has none of those, so it counted ``seq_len``
  windows), throughput from peak FLOP/s x the assumed CPU MFU (0.25);
- **after**: tokens counted with the model's tokenizer as the trainer tokenizes the rows (its chat
  template), throughput measured by a calibration on this machine (timed here, with a fresh cache);
- **run**: ``trainteam.trainers.train`` over the same rows: the tokens it computed (every row's
  templated tokens: one epoch sees each row once), the trainer's own token count (which leaves out
  tokens equal to the pad id: SmolLM2's pad is its ``<|im_end|>``), its tokens/s and training time.

Ratios are estimate / run (1.00 = exact). The 2 cores are shared: the load average is printed.
Ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

QUESTIONS = [
    (
        "What is the capital of {}?",
        ["France", "Spain", "Italy", "Japan", "Peru", "Kenya", "Chile", "Egypt"],
        ["Paris", "Madrid", "Rome", "Tokyo", "Lima", "Nairobi", "Santiago", "Cairo"],
    ),
    (
        "Give the opposite of the word '{}'.",
        ["hot", "big", "fast", "happy", "early", "open", "full", "rich"],
        ["cold", "small", "slow", "sad", "late", "closed", "empty", "poor"],
    ),
]


def rows(n: int) -> list[dict]:
    out = []
    for i in range(n):
        q, subjects, answers = QUESTIONS[i % 2]
        k = (i // 2) % len(subjects)
        out.append({"prompt": q.format(subjects[k]) + f" (question {i})", "completion": answers[k]})
    return out


def as_chat(pairs: list[dict]) -> list[dict]:
    return [
        {"messages": [{"role": "user", "content": r["prompt"]}, {"role": "assistant", "content": r["completion"]}]}
        for r in pairs
    ]


def old_row_tokens(data: list[dict]) -> float | None:
    """The planner's row bound before this change: bytes of prompt + completion + text, + 2."""
    sizes = [sum(len(str(r.get(k, "")).encode()) for k in ("prompt", "completion", "text")) for r in data]
    return sum(sizes) / len(sizes) + 2 if any(sizes) else None


def measure(model: Path, data: list[dict], threads: int, out: Path) -> dict:
    from trainteam.trainers import train
    from trainteam.trainers.planning import detect_hardware, plan
    from trainteam.trainers.planning.calibrate import calibrate
    from trainteam.trainers.planning.tokens import count_tokens, model_tokenizer
    from trainteam.trainers.training.config import ModelSpec, TrainConfig

    cfg = TrainConfig.model_validate(
        {
            "output_dir": str(out),
            "num_train_epochs": 1,
            "per_device_train_batch_size": 8,
            "max_length": 256,
            "learning_rate": 1e-4,
            "use_peft": True,
            "lora_r": 8,
            "lora_alpha": 16,
            "threads": threads,
        }
    )
    spec, hw = ModelSpec(path=model), detect_hardware()
    before = plan(cfg, spec, hw, dataset_rows=len(data), row_tokens=old_row_tokens(data))
    tok = model_tokenizer(str(model))
    counted = count_tokens(tok, data, "sft")
    per_row = counted.mean(cfg.max_length)
    t0 = time.perf_counter()
    cal = calibrate(spec, cfg, cfg.per_device_train_batch_size * per_row, device=hw.device, tokenizer=tok)
    cal_s = time.perf_counter() - t0
    after = plan(cfg, spec, hw, dataset_rows=len(data), row_tokens=per_row, tokens_per_second=cal.tokens_per_s)
    report = train("sft", cfg, str(model), data, tokenizer=tok, progress=False)
    tel = report.telemetry
    computed = sum(min(n, cfg.max_length) for n in counted.lengths)  # one epoch: every row once
    return {
        "steps": {"before": before.max_steps, "after": after.max_steps, "run": report.steps_done},
        "tokens": {
            "before": before.total_tokens,
            "after": after.total_tokens,
            "run_computed": computed,
            "run_trainer_count": tel["tokens"],
        },
        "tokens_per_s": {
            "before": round(before.cost.tokens_per_second, 1),
            "after": round(cal.tokens_per_s, 1),
            "run": tel["tokens_per_s"],
            "run_computed": round(computed / tel["step_time_s"], 1),
        },
        "minutes": {
            "before": round(before.cost.hours * 60, 2),
            "after": round(after.cost.hours * 60, 2),
            "run_training": round(tel["step_time_s"] / 60, 2),
            "run_wall": round(tel["wall_s"] / 60, 2),
        },
        "calibration_s": round(cal_s, 1),
        "calibration_tokens_per_step": cal.tokens_per_step,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model",
        type=Path,
        default=Path(os.environ.get("TRAINTEAM_TEST_CACHE") or Path.home() / ".cache" / "trainteam-tests")
        / "smollm2-135m-instruct",
    )
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["TRAINTEAM_CACHE_DIR"] = str(Path(tmp) / "cache")  # a fresh calibration, timed
        for shape, data in (("pair", rows(args.rows)), ("chat", as_chat(rows(args.rows)))):
            print(f"{shape}: load {os.getloadavg()[0]:.2f}", flush=True)
            r = measure(args.model, data, args.threads, Path(tmp) / shape)
            results[shape] = r
            tk, tps, mins = r["tokens"], r["tokens_per_s"], r["minutes"]
            print(
                f"  tokens      before {tk['before']:>8,}  after {tk['after']:>8,}  run {tk['run_computed']:>8,} "
                f"(trainer's count {tk['run_trainer_count']:,})  before/run {tk['before'] / tk['run_computed']:.2f}  "
                f"after/run {tk['after'] / tk['run_computed']:.2f}"
            )
            print(f"  tokens/s    before {tps['before']:>8}  after {tps['after']:>8}  run {tps['run_computed']:>8}")
            print(
                f"  minutes     before {mins['before']:>8}  after {mins['after']:>8}  run {mins['run_training']:>8} "
                f"(wall {mins['run_wall']})  before/run {mins['before'] / mins['run_training']:.2f}  "
                f"after/run {mins['after'] / mins['run_training']:.2f}"
            )
            print(
                f"  calibration {r['calibration_s']} s ({r['calibration_tokens_per_step']} tokens per step)", flush=True
            )
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()
