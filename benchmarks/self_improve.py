"""The self-training loop, measured: the team's own runs → chat data with tool calls → tool-calling
LoRA SFT of a real instruct model through ``train_model`` → tool-call agreement on held-out runs.

1. gather: ``--runs`` real tiny ``train_model`` runs under the offline policy (tests/spine's task),
   each in its own workspace, then ``transcripts export --format chat`` of each;
2. curate: ``curate run --heldout-by run_id`` (near_dedup off, as transcripts want) holds out whole runs;
3. train: ``execute-workflow train_model`` on SmolLM2-135M-Instruct (tests/real_model.py's fixture,
   ``--model`` another folder) with ``model.chat_template: qwen2_5`` (TRL's ChatML template with tools:
   SmolLM2's own drops the tools and the calls), LoRA r 8, batch 1, ``--steps`` steps, loss on the
   assistant turns only (each turn a prompt/completion pair). Pairs are cut to ``--max-length`` tokens
   from the start (TRL's ``truncation_mode: keep_end``), so each keeps its completion (the tool call),
   the tool schemas and the user turn naming the step; evaluation gives the whole prompt. A full-length
   step (~3k tokens) took ~120 s here at a load of 4. The workflow's own eval gets the ``--eval-rows`` shortest held-out
   rows (its battery is not what this measures);
4. agreement: for every held-out assistant turn that called a tool, the model is given the messages
   before it and the tools (OpenAI shape, through trainteam's serving ``ChatModel.complete``, greedy)
   and agrees when its first tool call has the offline policy's name and arguments. The base model is
   asked with the same template (its weights beside the templated tokenizer), the trained one is the
   registered folder.

Sized for the 2-core CPU: rows are 1.6-4.5k tokens (system prompt, persona card, tool schemas).
Ends with one ``RESULT {json}`` line (tool_call_agreement_base/_trained, loop_wall_s, peak_rss_mb, ...).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "spine"))
CLI = [sys.executable, "-m", "trainteam.cli"]
TEMPLATE = "qwen2_5"


def _env(threads: int) -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "TRAINTEAM_THREADS": str(threads),
            "PYDANTIC_AI_NO_BANNER": "1", "HF_DATASETS_DISABLE_PROGRESS_BARS": "1"}


def _cli(args: list[str], cwd: Path, threads: int = 1, timeout: int = 3600) -> str:
    proc = subprocess.run(CLI + args, cwd=cwd, env=_env(threads), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"trainteam {' '.join(args[:3])} exited {proc.returncode}: {proc.stderr[-3000:]}")
    return proc.stdout


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def gather(work: Path, runs: int) -> Path:
    import yaml
    from spine_helpers import TINY_TASK

    task = work / "tiny.yaml"
    task.write_text(yaml.safe_dump(TINY_TASK))
    joined = work / "transcripts.jsonl"
    with joined.open("w") as fh:
        for i in range(runs):
            ws, rid = work / f"ws{i}", f"run{i}"
            _cli(["-w", str(ws), "execute-workflow", "train_model", "--task", str(task), "--run-id", rid, "--yes", "-q"],
                 work)
            out = work / f"{rid}.jsonl"
            _cli(["-w", str(ws), "transcripts", "export", "--format", "chat", "-o", str(out)], work)
            fh.write(out.read_text())
    return joined


def curate(work: Path, joined: Path, runs: int) -> tuple[Path, Path]:
    config = work / "curation.yaml"
    config.write_text("near_dedup: null\n")
    out = work / "curated"
    _cli(["-w", str(work / "loop"), "curate", "run", str(joined), "--config", str(config), "--heldout-by", "run_id",
          "--heldout-fraction", str(1 / runs), "-o", str(out), "--json"], work)
    return out / "train.jsonl", out / "heldout.jsonl"


def token_counts(model: Path, train: Path) -> dict[str, Any]:
    from trainteam.trainers.method_data import load_data, row_lengths, sft_dataset
    from trainteam.trainers.planning.tokens import model_tokenizer

    tok = model_tokenizer(str(model), TEMPLATE)
    lengths = row_lengths(tok, sft_dataset(tok, load_data(train, "sft")))
    return {"pairs": len(lengths), "mean": round(sum(lengths) / len(lengths)), "max": max(lengths),
            "total": sum(lengths)}


def train(work: Path, model: Path, train_path: Path, heldout: Path, steps: int, lr: float, eval_rows: int,
          max_length: int, threads: int) -> tuple[Path, dict]:
    import yaml

    held = sorted(_rows(heldout), key=lambda r: len(json.dumps(r)))[:eval_rows]
    eval_path = work / "workflow_eval.jsonl"
    eval_path.write_text("".join(json.dumps(r) + "\n" for r in held))
    task = {"name": "self-improve", "model": {"path": str(model), "chat_template": TEMPLATE},
            "data": {"path": str(train_path), "eval_path": str(eval_path)}, "stages": ["sft"],
            "training": {"sft": {"max_steps": steps, "per_device_train_batch_size": 1, "learning_rate": lr,
                                 "max_length": max_length, "use_peft": True, "lora_r": 8, "lora_alpha": 16,
                                 "logging_steps": 1, "trl": {"truncation_mode": "keep_end"}}},
            "gates": {"sft": {"metric": "exact_match", "min": 0.0}}, "eval": {"max_new_tokens": 8, "batch_size": 1},
            "curation": {"near_dedup": None, "rows": {"max_tokens": None}}, "budget": {"max_wall_minutes": 60}, "require_approval": []}
    loop = work / "loop"
    (loop / "task.yaml").parent.mkdir(parents=True, exist_ok=True)
    (loop / "task.yaml").write_text(yaml.safe_dump(task, sort_keys=False))
    checked = _cli(["validate", "task.yaml", "--no-measure"], loop)
    print("validate:", next((ln.strip() for ln in checked.splitlines() if TEMPLATE in ln), "(template not stated)"))
    out = _cli(["execute-workflow", "train_model", "--task", "task.yaml", "--yes", "--json"], loop, threads=threads)
    run = json.loads(out[out.index("{"):])
    if run.get("status") != "completed":
        raise SystemExit(f"train_model: {run.get('status')}: {json.dumps(run)[:2000]}")
    (record,) = json.loads(_cli(["models", "list", "--json"], loop))
    return Path(record["path"]), run


def base_folder(work: Path, model: Path) -> Path:
    """The base weights beside the templated tokenizer (what the base model is asked with)."""
    from trainteam.trainers.chat_templates import save_tokenizer_with_template

    folder = work / "base_templated"
    save_tokenizer_with_template(model, TEMPLATE, folder)
    for f in model.iterdir():
        if f.suffix in (".safetensors", ".json") and f.name.startswith(("model", "config", "generation")):
            (folder / f.name).unlink(missing_ok=True)
            (folder / f.name).symlink_to(f)
    return folder


def openai_messages(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        m = {k: v for k, v in m.items() if v is not None}
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {"name": c["function"]["name"],
                                                  "arguments": json.dumps(c["function"]["arguments"])}}
                               for c in m["tool_calls"]]
        out.append(m)
    return out


def call_turns(heldout: Path) -> list[tuple[list[dict], list[dict], dict]]:
    """(messages before the turn, tools, the offline policy's first call) of every held-out tool-call turn."""
    turns = []
    for row in _rows(heldout):
        msgs = row["messages"]
        for i, m in enumerate(msgs):
            if m.get("role") == "assistant" and m.get("tool_calls"):
                fn = m["tool_calls"][0]["function"]
                turns.append((openai_messages(msgs[:i]), row["tools"], {"name": fn["name"], "arguments": fn["arguments"]}))
    return turns


def agreement(folder: Path, turns: list, max_new_tokens: int) -> dict[str, Any]:
    from trainteam.trainers.serving import ChatModel

    chat = ChatModel(folder, "m", max_new_tokens=max_new_tokens)
    hits, names, samples = 0, 0, []
    t0 = time.perf_counter()
    for msgs, tools, want in turns:
        msg = chat.complete({"messages": msgs, "tools": tools, "temperature": 0})["choices"][0]["message"]
        got = None
        if msg.get("tool_calls"):
            fn = msg["tool_calls"][0]["function"]
            try:
                got = {"name": fn["name"], "arguments": json.loads(fn["arguments"])}
            except json.JSONDecodeError:
                got = {"name": fn["name"], "arguments": fn["arguments"]}
        hits += got == want
        names += bool(got) and got["name"] == want["name"]
        if len(samples) < 3:
            samples.append({"want": want, "got": got if got else (msg.get("content") or "")[:160]})
    return {"agreement": hits / len(turns), "name_agreement": names / len(turns), "samples": samples,
            "wall_s": round(time.perf_counter() - t0, 1)}


def _step_time(trained: Path) -> float | None:
    """Median seconds per training step, from the SFT stage's heartbeats (their step_time is cumulative)."""
    beats = [json.loads(line) for hist in trained.parent.glob("sft-*/run-history.jsonl")
             for line in hist.read_text().splitlines() if '"beat"' in line]
    marks = [0.0] + [b["step_time"] for b in beats]
    steps = [0] + [b["step"] for b in beats]
    per = sorted((marks[i + 1] - marks[i]) / max(1, steps[i + 1] - steps[i]) for i in range(len(beats)))
    return round(per[len(per) // 2], 1) if per else None


def peak_rss_mb() -> float:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    kids = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, kids) / 1024, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, default=None, help="default: the tests' SmolLM2-135M-Instruct")
    ap.add_argument("--runs", type=int, default=3, help="offline runs gathered (one is held out)")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--max-length", type=int, default=1024, help="tokens kept per pair, from the end (TRL's "
                    "truncation_mode keep_end: the completion, its tool call, the tool schemas and the user turn stay)")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--eval-rows", type=int, default=1)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-turns", type=int, default=None, help="held-out call turns asked (default: all)")
    ap.add_argument("--work", type=Path, default=None)
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from real_model import ensure_real_model

    model = (args.model or ensure_real_model()).resolve()
    work = args.work or Path(tempfile.mkdtemp(prefix="self-improve-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    walls: dict[str, float] = {}

    def lap(name: str, start: float) -> float:
        walls[name] = round(time.perf_counter() - start, 1)
        print(f"{name}: {walls[name]} s", flush=True)
        return time.perf_counter()

    t = time.perf_counter()
    joined = gather(work, args.runs)
    t = lap("gather", t)
    train_path, heldout = curate(work, joined, args.runs)
    tokens = token_counts(model, train_path)
    print("tokens per pair:", tokens, flush=True)
    t = lap("curate", t)
    trained, run = train(work, model, train_path, heldout, args.steps, args.lr, args.eval_rows,
                         max_length=args.max_length, threads=args.threads)
    t = lap("train_model", t)
    turns = call_turns(heldout)[:args.max_turns]
    base = agreement(base_folder(work, model), turns, args.max_new_tokens)
    t = lap("eval_base", t)
    after = agreement(trained, turns, args.max_new_tokens)
    lap("eval_trained", t)
    print("base samples:", json.dumps(base["samples"])[:800])
    print("trained samples:", json.dumps(after["samples"])[:800])
    result = {
        "tool_call_agreement_base": round(base["agreement"], 3),
        "tool_call_agreement_trained": round(after["agreement"], 3),
        "tool_name_agreement_base": round(base["name_agreement"], 3),
        "tool_name_agreement_trained": round(after["name_agreement"], 3),
        "heldout_call_turns": len(turns), "train_pairs": tokens["pairs"], "tokens_per_pair_mean": tokens["mean"],
        "tokens_per_pair_max": tokens["max"], "sft_steps": args.steps, "sft_max_length_keep_end": args.max_length,
        "runs": args.runs, "sft_step_s": _step_time(trained),
        "train_loss": run.get("metrics", {}).get("train.sft.train_loss") or run.get("metrics", {}).get("train_loss"),
        "loop_wall_s": round(time.perf_counter() - t0, 1), "walls_s": walls, "peak_rss_mb": peak_rss_mb(),
        "threads": args.threads, "load_avg": os.getloadavg()[0], "work": str(work),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
