"""The self-training loop, measured: the team's own runs → chat data with tool calls → tool-calling
LoRA SFT of a real instruct model through ``train_model`` → tool-call agreement on held-out runs.

1. gather: ``--runs`` real tiny ``train_model`` runs under the offline policy (tests/spine_helpers.py's task) in one
   workspace;
2. the loop: ``trainteam self-improve --yes`` in that workspace (``workflows/improve/self_improve.py``): chat
   export of every run with the ``--prompt`` style (compact: a short brief, the step's tool and the
   report only: ``agents/compact.py``), curated with whole runs held out, LoRA SFT of SmolLM2-135M-Instruct
   (tests/real_model.py's fixture, ``--model`` another folder) with ``model.chat_template: qwen2_5``
   through ``train_model``, agreement on the held-out steps of every persona, gate, register, bind;
3. the base model is asked the same held-out turns (its weights beside the templated tokenizer), with
   the product's ``agents/tool_agreement.py``, so base and trained are measured the same way;
4. bound runs (``--bound-check``, default the training_engineer, then all four personas): a full
   ``train_model`` run on the same task with those personas on the trained model, its gate outcomes
   against the first offline run's (``bound_same_gate_outcomes``), each run's id as the product makes
   one; then (``--picked-bound-id``) the training_engineer once more with a hand-picked id. ``--picked-ids``
   gives every other gathered run a hand-picked id (a workspace of a person's own run names);
5. renamed (``tool_call_agreement_trained_renamed``): the trained model on the held-out turns with each
   held-out run renamed as a person might name it (``RENAMED``, names the loop's ``vary_run_ids`` never
   gives): the run id is in every compact prompt, and a model that keyed on its form fails here.

Agreement: for every held-out assistant turn that called a step tool, the model gets the turns before
it and the tools (the OpenAI request, through serving's ``ChatModel``, greedy) and agrees when its first
call has the offline policy's name and arguments. The report (``final_result``) is counted apart.
Token lengths per training pair are given for both prompt styles (``tokens_full`` / ``tokens_compact``).
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
CLI = [sys.executable, "-m", "trainteam.cli"]
TEMPLATE = "qwen2_5"
PERSONAS = ("data_curator", "training_engineer", "eval_judge", "ml_orchestrator")


def _env(threads: int) -> dict[str, str]:
    return {
        **os.environ,
        "OMP_NUM_THREADS": str(threads),
        "TRAINTEAM_THREADS": str(threads),
        "PYDANTIC_AI_NO_BANNER": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }


def _cli(args: list[str], cwd: Path, threads: int = 1, timeout: int = 3600, ok=(0,)) -> str:
    proc = subprocess.run(CLI + args, cwd=cwd, env=_env(threads), capture_output=True, text=True, timeout=timeout)
    if proc.returncode not in ok:
        raise SystemExit(f"trainteam {' '.join(args[:3])} exited {proc.returncode}: {proc.stderr[-3000:]}")
    return proc.stdout


PICKED = ("baseline", "lr-sweep-2", "exp7", "try_again", "final-run", "ablation-b", "v2", "smoke")
# names for the held-out runs in the renamed measure: none is a name ``vary_run_ids`` gives training runs
RENAMED = ("bound-training", "kitten", "dec3_demo", "ablation-b", "my.model", "q4")


def renamed_turns(heldout: Path) -> list:
    """The held-out turns with each held-out run named as a person might (``RENAMED``), everywhere its
    conversation says it: does the trained model still call what the policy called?"""
    from trainteam.agents.tool_agreement import call_turns, read_rows
    from trainteam.workflows.improve.self_improve import rename_run

    rows = read_rows(heldout)
    names = {run: RENAMED[i % len(RENAMED)] for i, run in enumerate(sorted({r["run_id"] for r in rows}))}
    return call_turns([rename_run(r, r["run_id"], names[r["run_id"]]) for r in rows], PERSONAS)


def product_id() -> str:
    from trainteam.workflows.runs.runner import new_run_id

    return new_run_id("tiny")


def gather(work: Path, ws: Path, runs: int, picked: bool = False) -> list[str]:
    import yaml
    from spine_helpers import TINY_TASK

    task = work / "tiny.yaml"
    task.write_text(yaml.safe_dump(TINY_TASK))
    # ids as the product makes them (a name, a stamp, hex): a numbered run0..runN taught the model to write
    # the held-out run's number where the training runs' had none (measured: "step train runs train3")
    # ``picked``: every other run gets a hand-picked name, as a person's --run-id would be
    ids = [PICKED[i // 2 % len(PICKED)] if picked and i % 2 else product_id() for i in range(runs)]
    for rid in ids:
        _cli(
            ["-w", str(ws), "execute-workflow", "train_model", "--task", str(task), "--run-id", rid, "--yes", "-q"],
            work,
        )
    return ids


def token_counts(model: Path, ws: Path, work: Path, run: str) -> dict[str, Any]:
    """Tokens per training pair of one run's rows, full prompt and compact prompt."""
    from trainteam.trainers.methods.method_data import load_data
    from trainteam.trainers.methods.sft import row_lengths, sft_dataset
    from trainteam.trainers.planning.tokens import model_tokenizer

    tok = model_tokenizer(str(model), TEMPLATE)
    out = {}
    for style in ("full", "compact"):
        path = work / f"{run}-{style}.jsonl"
        _cli(
            [
                "-w",
                str(ws),
                "transcripts",
                "export",
                "--format",
                "chat",
                "--prompt",
                style,
                "--run",
                run,
                "-o",
                str(path),
            ],
            work,
        )
        lengths = row_lengths(tok, sft_dataset(tok, load_data(path, "sft")))
        out[style] = {"pairs": len(lengths), "mean": round(sum(lengths) / len(lengths)), "max": max(lengths)}
    return out


def loop(work: Path, ws: Path, model: Path, args) -> dict:
    cmd = [
        "-w",
        str(ws),
        "self-improve",
        "--model",
        str(model),
        "--prompt",
        args.prompt,
        "--steps",
        str(args.steps),
        "--lr",
        str(args.lr),
        "--max-length",
        str(args.max_length),
        "--grad-accum",
        str(args.grad_accum),
        "--heldout-fraction",
        str(args.heldout_fraction),
        "--min-agreement",
        "0.95",
        "--yes",
        "--json",
        "--run-id",
        "self-improve",
    ] + [a for p in PERSONAS for a in ("--bind", p)]
    cmd += [
        "--gradient-checkpointing" if args.gradient_checkpointing else "--no-gradient-checkpointing",
        "--precision",
        args.precision,
        "--max-memory-gib",
        str(args.max_memory_gib),
    ]
    proc = subprocess.Popen(
        CLI + cmd, cwd=work, env=_env(args.threads), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    rss = RssWatch(proc.pid).start()
    stdout, stderr = proc.communicate(timeout=7200)
    rss.stop()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"trainteam self-improve exited {proc.returncode}: {stderr[-3000:]}")
    return {**json.loads(stdout[stdout.index("{") :]), "rss": rss.summary()}


class RssWatch:
    """The resident memory of a process and its children, sampled twice a second: the peak, when it
    came (seconds from the start) and the peak of each minute, to tell training from evaluation."""

    def __init__(self, pid: int):
        import threading

        self.pid, self.samples, self.t0 = pid, [], time.perf_counter()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> RssWatch:
        self._thread.start()
        return self

    def _run(self) -> None:
        import psutil

        while not self._stop.wait(0.5):
            try:
                root = psutil.Process(self.pid)
                mb = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**20
            except psutil.Error:
                continue
            self.samples.append((time.perf_counter() - self.t0, mb))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict[str, Any]:
        if not self.samples:
            return {}
        at, peak = max(self.samples, key=lambda s: s[1])
        minutes: dict[int, float] = {}
        for t, mb in self.samples:
            minutes[int(t // 60)] = max(minutes.get(int(t // 60), 0.0), mb)
        return {
            "peak_mb": round(peak),
            "peak_at_s": round(at),
            "per_minute_mb": [round(minutes[m]) for m in sorted(minutes)],
        }


def bound_run(
    work: Path, ws: Path, out: dict, bind: list[str], reference: str, rid: str | None = None
) -> dict[str, Any]:
    """A full ``train_model`` run on the demo task with the personas ``bind`` (only those) on the trained
    model with the compact prompt, bound here whether or not the loop's gate bound them: its status and
    gate outcomes against ``reference``'s (an offline run), and which personas' turns the model decided."""
    from trainteam.agents import transcripts
    from trainteam.agents.chat_export import gate_outcomes
    from trainteam.workspace import Workspace

    for persona in PERSONAS:  # exactly ``bind`` on the model (the loop binds only what its gate passed)
        if persona in bind:
            _cli(
                ["-w", str(ws), "models", "bind", out["model"], "--role", f"persona:{persona}", "--prompt", "compact"],
                work,
            )
        else:
            _cli(["-w", str(ws), "models", "unbind", f"persona:{persona}"], work, ok=(0, 1, 2))
    # an id as the product makes one (name-stamp-hex), like the gathered runs': with a hand-picked id
    # ("bound-training") the trained model put the report's fields into the train call (measured, 2 of 3 loops)
    rid = rid or product_id()
    t0 = time.perf_counter()
    proc = subprocess.run(
        CLI
        + [
            "-w",
            str(ws),
            "execute-workflow",
            "train_model",
            "--task",
            str(work / "tiny.yaml"),
            "--run-id",
            rid,
            "--yes",
            "-q",
        ],
        cwd=work,
        env=_env(2),
        capture_output=True,
        text=True,
        timeout=3600,
    )
    wall = round(time.perf_counter() - t0, 1)
    w = Workspace.open(ws)
    recs = list(transcripts.read_run(w, rid))
    by_model = sorted(
        {r["persona"] for r in recs if r.get("model") == out["model"] or out["model"] in str(r.get("model"))}
    )
    want, got = gate_outcomes(w, reference), gate_outcomes(w, rid)
    return {
        "personas": bind,
        "exit": proc.returncode,
        "same_gate_outcomes": want == got and proc.returncode == 0,
        "gates": got,
        "reference_gates": want,
        "decided_by_model": by_model,
        "wall_s": wall,
        "error": proc.stderr.strip().splitlines()[-1][:300] if proc.returncode and proc.stderr.strip() else None,
    }


def base_folder(work: Path, model: Path) -> Path:
    """The base weights beside the templated tokenizer (what the base model is asked with)."""
    from trainteam.trainers.training.chat_templates import save_tokenizer_with_template

    folder = work / "base_templated"
    save_tokenizer_with_template(model, TEMPLATE, folder)
    for f in model.iterdir():
        if f.suffix in (".safetensors", ".json") and f.name.startswith(("model", "config", "generation")):
            (folder / f.name).unlink(missing_ok=True)
            (folder / f.name).symlink_to(f)
    return folder


def _step_time(trained: Path) -> float | None:
    """Median seconds per training step, from the SFT stage's heartbeats (their step_time is cumulative)."""
    beats = [
        json.loads(line)
        for hist in trained.parent.glob("sft-*/run-history.jsonl")
        for line in hist.read_text().splitlines()
        if '"beat"' in line
    ]
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
    ap.add_argument("--runs", type=int, default=6, help="offline runs gathered (whole runs held out)")
    ap.add_argument("--heldout-fraction", type=float, default=0.34)
    ap.add_argument("--prompt", default="compact", choices=("compact", "full"))
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--max-length", type=int, default=1024, help="tokens kept per pair, from the end")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--gradient-checkpointing", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--precision", default="auto", choices=("auto", "fp32", "bf16"))
    ap.add_argument("--max-memory-gib", type=float, default=4.0, help="the SFT run's memory budget (the issue's goal)")
    ap.add_argument("--max-new-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--work", type=Path, default=None)
    ap.add_argument("--picked-ids", action="store_true", help="every other gathered run gets a hand-picked id")
    ap.add_argument(
        "--picked-bound-id",
        default="bound-training",
        help="one more bound run (training_engineer) with this hand-picked id ('' for none)",
    )
    ap.add_argument(
        "--bound-check",
        nargs="*",
        default=["training_engineer", "all"],
        metavar="PERSONAS",
        help="after the loop, one train_model run per item with those personas (comma-separated, or "
        "all) bound to the trained model (bound now if the gate refused), its gate outcomes "
        "against an offline run's",
    )
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from real_model import ensure_real_model

    from trainteam.agents.tool_agreement import agreement_of, call_turns, read_rows
    from trainteam.workflows.improve.self_improve import training_precision

    model = (args.model or ensure_real_model()).resolve()
    work = args.work or Path(tempfile.mkdtemp(prefix="self-improve-"))
    work.mkdir(parents=True, exist_ok=True)
    ws = work / "ws"
    walls: dict[str, float] = {}

    def lap(name: str, start: float) -> float:
        walls[name] = round(time.perf_counter() - start, 1)
        print(f"{name}: {walls[name]} s", flush=True)
        return time.perf_counter()

    t = time.perf_counter()
    runs = gather(work, ws, args.runs, args.picked_ids)
    t = lap("gather", t)
    tokens = token_counts(model, ws, work, runs[0])
    print("tokens per pair:", tokens, flush=True)
    t = lap("token_counts", t)
    out = loop(work, ws, model, args)
    t = lap("self_improve", t)
    print("self-improve:", out.get("status"), json.dumps(out.get("gate")), json.dumps(out.get("train")), flush=True)
    after = out.get("agreement") or {}
    turns = call_turns(read_rows(Path(out["data"]["heldout"])), PERSONAS)
    base = agreement_of(base_folder(work, model), turns, args.max_new_tokens).model_dump()
    t = lap("eval_base", t)
    renamed = (
        agreement_of(
            Path(out["model_path"]), renamed_turns(Path(out["data"]["heldout"])), args.max_new_tokens
        ).model_dump()
        if out.get("model_path")
        else {}
    )
    t = lap("eval_renamed", t)
    loop_wall = round(walls["gather"] + walls["self_improve"], 1)  # the loop as a person runs it
    sets = [PERSONAS if b == "all" else b.split(",") for b in args.bound_check]
    bound = [bound_run(work, ws, out, list(personas), runs[0]) for personas in sets] if out.get("model") else []
    if out.get("model") and args.picked_bound_id:  # a person's own id, unlike the product's
        bound.append(
            {
                **bound_run(work, ws, out, ["training_engineer"], runs[0], args.picked_bound_id),
                "run_id": args.picked_bound_id,
            }
        )
    for b in bound:
        print("bound run:", json.dumps(b), flush=True)
    if bound:
        lap("bound_runs", t)
    print("base samples:", json.dumps(base["samples"])[:800])
    print("trained samples:", json.dumps(after.get("samples"))[:1500])
    print("renamed samples:", json.dumps(renamed.get("samples"))[:1500])
    result = {
        "tool_call_agreement_base": base["agreement"],
        "tool_call_agreement_trained": after.get("agreement"),
        "tool_action_agreement_base": base["action_agreement"],
        "tool_action_agreement_trained": after.get("action_agreement"),
        "tool_name_agreement_base": base["name_agreement"],
        "tool_name_agreement_trained": after.get("name_agreement"),
        "tool_call_agreement_trained_renamed": renamed.get("agreement"),
        "final_decision_agreement_base": base["final_decision_agreement"],
        "final_decision_agreement_trained": after.get("final_decision_agreement"),
        "final_agreement_trained": after.get("final_agreement"),
        "by_persona_trained": after.get("by_persona"),
        "heldout_call_turns": after.get("turns"),
        "status": out.get("status"),
        "train_rows": out["data"]["train_rows"],
        "heldout_runs": out["data"]["heldout_runs"],
        "tokens_full": tokens["full"],
        "tokens_compact": tokens["compact"],
        "prompt": args.prompt,
        "sft_steps": args.steps,
        "lr": args.lr,
        "max_length": args.max_length,
        "grad_accum": args.grad_accum,
        "gradient_checkpointing": args.gradient_checkpointing,
        "precision": training_precision(args.precision),
        "max_memory_gib": args.max_memory_gib,
        "picked_ids": args.picked_ids,
        "runs": args.runs,
        "sft_step_s": _step_time(Path(out["model_path"])) if out.get("model_path") else None,
        "bound_runs": bound,
        "bound_same_gate_outcomes": all(b["same_gate_outcomes"] for b in bound) if bound else None,
        "loop_wall_s": loop_wall,
        "walls_s": walls,
        "peak_rss_mb": peak_rss_mb(),
        "self_improve_rss": out.get("rss"),
        "threads": args.threads,
        "load_avg": os.getloadavg()[0],
        "work": str(work),
    }
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
