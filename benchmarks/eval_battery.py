"""Evaluation and serving costs, side by side in one run.

One tiny Llama (hidden 128 × 2 layers) is trained with ``trainers.train`` (SFT on the
demo addition task), then on the same checkpoint and the same held-out problems:

1. Exact match: lm-evaluation-harness (baseline, a generate_until task written by
   ``write_exact_match_task``) against ``trainers.eval_battery.exact_match`` — the scores
   must agree; the ratio is the wall time of the two.
2. The full post-train battery (loss, exact match, format, determinism, repetition)
   against exact match alone: what the reliability checks cost.
3. Serving: one request at a time over HTTP to ``agents.serving`` (openai client)
   against the same greedy ``generate`` called in-process (baseline): the HTTP seam's
   overhead per request.

Ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--n-eval", type=int, default=200)
    ap.add_argument("--requests", type=int, default=40)
    args = ap.parse_args()

    import torch

    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
    from trainteam.curation.formats import prompt_text
    from trainteam.trainers import (
        ModelSpec,
        SpikeOptions,
        TokenizerConfig,
        TrainConfig,
        build_model,
        train,
        train_tokenizer,
    )
    from trainteam.trainers.evaluation.battery import exact_match, run_battery
    from trainteam.trainers.evaluation.lm_eval_runner import run_lm_eval, write_exact_match_task
    from trainteam.trainers.training.tokenizer import load_tokenizer

    tmp = Path(tempfile.mkdtemp(prefix="bench-eval-"))
    train_recs, held = generate_arithmetic(ArithmeticConfig(task="addition", n_train=20000, n_eval=args.n_eval))
    tok_dir = train_tokenizer(
        (r["prompt"] + r["completion"] for r in train_recs), TokenizerConfig(vocab_size=300), tmp / "tok"
    )
    tok = load_tokenizer(tok_dir)
    model = build_model(ModelSpec(hidden_size=128, num_layers=2, num_heads=4), tok)
    t0 = time.perf_counter()
    rep = train(
        "sft",
        TrainConfig(
            max_steps=args.steps,
            per_device_train_batch_size=64,
            learning_rate=3e-3,
            output_dir=tmp / "sft",
            resume="never",
            spike=SpikeOptions(enabled=False),
        ),
        model,
        train_recs,
        tokenizer=tok,
        progress=False,
    )
    train_s = time.perf_counter() - t0
    ckpt = rep.final_dir
    if not (ckpt / "tokenizer.json").is_file():
        tok.save_pretrained(ckpt)
    print(f"trained {args.steps} SFT steps in {train_s:.1f} s -> {ckpt}")

    # 1. exact match: harness (baseline) vs native
    t0 = time.perf_counter()
    import lm_eval.evaluator  # noqa: F401  (import cost reported on its own)

    harness_import_s = time.perf_counter() - t0
    write_exact_match_task(tmp / "tasks", "bench_addition", held, tok)
    t0 = time.perf_counter()
    h = run_lm_eval(ckpt, ["bench_addition"], include_path=tmp / "tasks", batch_size=64)
    harness_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    native = exact_match(ckpt, tok, held, batch_size=64)
    native_s = time.perf_counter() - t0
    harness_em = h.metric("bench_addition", "exact_match")
    print(
        f"exact match  harness {harness_em:.4f} in {harness_s:.2f} s (+{harness_import_s:.1f} s import) | "
        f"native {native.accuracy:.4f} in {native_s:.2f} s | harness/native time {harness_s / native_s:.2f}x"
    )

    # 2. full battery vs exact match alone
    t0 = time.perf_counter()
    battery = run_battery(ckpt, tok_dir, held, stage="sft", train_records=train_recs)
    battery_s = time.perf_counter() - t0
    print(f"battery {battery.metrics} in {battery_s:.2f} s | battery/exact-match time {battery_s / native_s:.2f}x")

    # 3. serving over HTTP vs in-process generate
    from openai import OpenAI

    from trainteam.trainers.serving.endpoint import ChatModel, ChatServer

    chat = ChatModel(ckpt, "bench")
    prompts = [p["prompt"] for p in held[: args.requests]]
    direct, http, same = [], [], 0
    with ChatServer(chat, port=0) as srv:
        client = OpenAI(base_url=srv.base_url, api_key="x", max_retries=0)
        client.chat.completions.create(model="bench", messages=[{"role": "user", "content": "1+1="}], max_tokens=8)
        for p in prompts:
            t0 = time.perf_counter()
            enc = chat.tokenizer(prompt_text(chat.tokenizer, p), return_tensors="pt", add_special_tokens=False)
            with torch.no_grad():
                out = chat.model.generate(
                    **enc,
                    max_new_tokens=8,
                    do_sample=False,
                    pad_token_id=chat.tokenizer.pad_token_id,
                    eos_token_id=chat.tokenizer.eos_token_id,
                )
            want = chat.tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)
            direct.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            got = (
                client.chat.completions.create(
                    model="bench", messages=[{"role": "user", "content": p}], max_tokens=8, temperature=0
                )
                .choices[0]
                .message.content
            )
            http.append(time.perf_counter() - t0)
            same += got == want
    d_ms, h_ms = statistics.median(direct) * 1e3, statistics.median(http) * 1e3
    print(
        f"serving  in-process generate {d_ms:.1f} ms | HTTP {h_ms:.1f} ms | HTTP/in-process {h_ms / d_ms:.2f}x "
        f"| identical answers {same}/{len(prompts)}"
    )

    print(
        "RESULT "
        + json.dumps(
            {
                "train_steps": args.steps,
                "train_s": round(train_s, 1),
                "n_eval": len(held),
                "harness_exact_match": harness_em,
                "native_exact_match": native.accuracy,
                "scores_agree": abs(harness_em - native.accuracy) < 1e-9,
                "harness_s": round(harness_s, 2),
                "harness_import_s": round(harness_import_s, 2),
                "native_s": round(native_s, 2),
                "harness_over_native_time": round(harness_s / native_s, 2),
                "battery_s": round(battery_s, 2),
                "battery_over_exact_match_time": round(battery_s / native_s, 2),
                "battery": {k: round(v, 4) for k, v in battery.metrics.items()},
                "serve_median_ms": round(h_ms, 1),
                "direct_median_ms": round(d_ms, 1),
                "serve_over_direct": round(h_ms / d_ms, 2),
                "serve_identical": f"{same}/{len(prompts)}",
            }
        )
    )


if __name__ == "__main__":
    main()
