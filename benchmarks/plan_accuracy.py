"""How close the planner's closed-form estimates come to what this machine measures.

Side by side, in one run, for three tiny Llama shapes (fp32, AdamW, SDPA, seq 128, batch 8):

1. parameters: ``ModelShape.num_params()`` vs ``count_parameters(build_model(...))``;
2. model states: weights + gradients + AdamW moments, estimated vs the bytes of the real
   tensors after one optimizer step;
3. activations: estimated vs the bytes autograd actually saves for backward during one
   forward (``torch.autograd.graph.saved_tensors_hooks``, shared storages counted once)
   plus the logits gradient that is alive when backward starts;
4. throughput: the plan's tokens/s (peak FLOP/s of this CPU x assumed MFU, 0.25 on a CPU) vs the
   tokens/s ``train("pretrain", ...)`` reports over 30 steps.

Baseline: the measurement. Ratios are estimate / measured (1.00 = exact; the planner
should stay within 0.5-2x for memory, which is what a go / no-go needs).
Ends with one line ``RESULT {json}``.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SHAPES = [(64, 2, 4), (128, 2, 4), (256, 4, 4)]
SEQ, BATCH = 128, 8


def _state_bytes(model, opt) -> int:
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    total += sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    for st in opt.state.values():
        total += sum(v.numel() * v.element_size() for v in st.values() if hasattr(v, "numel") and v.dim() > 0)
    return total


def _saved_activation_bytes(model, ids) -> int:
    import torch

    seen: dict[int, int] = {}

    def pack(t):
        try:
            ptr = t.untyped_storage().data_ptr()
            seen[ptr] = max(seen.get(ptr, 0), t.untyped_storage().nbytes())
        except RuntimeError:
            pass
        return t

    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    grad_logits = out.logits.numel() * 4
    return sum(b for ptr, b in seen.items() if ptr not in params) + grad_logits


def main() -> None:
    import torch

    from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
    from trainteam.trainers import (
        ModelSpec,
        TokenizerConfig,
        TrainConfig,
        build_model,
        load_tokenizer,
        train,
        train_tokenizer,
    )
    from trainteam.trainers.planning import ModelShape, detect_hardware, plan
    from trainteam.trainers.training.models import count_parameters

    torch.set_num_threads(1)
    rows, _ = generate_arithmetic(ArithmeticConfig(n_train=4000, n_eval=10, seed=0))
    work = Path(tempfile.mkdtemp(prefix="plan-acc-"))
    tok = load_tokenizer(
        train_tokenizer((r["prompt"] + r["completion"] for r in rows), TokenizerConfig(vocab_size=300), work / "tok")
    )
    hw = detect_hardware(processes=os.cpu_count() or 1)  # one core per "device": train() runs one thread here
    results = []
    print(
        f"{'shape':>12} {'params':>8} {'states est/meas':>16} {'activ est/meas':>15} {'tok/s est':>10} "
        f"{'tok/s meas':>10} {'ratio':>6}"
    )
    for h, layers, heads in SHAPES:
        spec = ModelSpec(
            hidden_size=h, num_layers=layers, num_heads=heads, max_position_embeddings=SEQ, vocab_size=len(tok)
        )
        model = build_model(spec, tok)
        n_real = count_parameters(model)
        cfg = TrainConfig(
            per_device_train_batch_size=BATCH,
            max_length=SEQ,
            max_steps=30,
            learning_rate=3e-3,
            output_dir=work / f"run{h}",
            threads=1,
            spike={"enabled": False},
            save_steps=None,
        )
        p = plan(cfg, spec, hw)
        ids = torch.randint(0, len(tok), (BATCH, SEQ))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        act_meas = _saved_activation_bytes(model, ids)
        opt.step()
        state_meas = _state_bytes(model, opt)
        state_est = (p.memory.weights_gib + p.memory.gradients_gib + p.memory.optimizer_gib) * 2**30
        act_est = p.memory.activations_gib * 2**30
        rep = train("pretrain", cfg, build_model(spec, tok), rows, tokenizer=tok, progress=False)
        tps_meas = rep.telemetry["tokens_per_s"]
        row = {
            "shape": f"{h}x{layers}",
            "params_ratio": ModelShape.from_spec(spec).num_params() / n_real,
            "state_ratio": state_est / state_meas,
            "activation_ratio": act_est / act_meas,
            "tokens_per_s_est": p.cost.tokens_per_second,
            "tokens_per_s_meas": tps_meas,
            "throughput_ratio": p.cost.tokens_per_second / tps_meas,
        }
        results.append(row)
        print(
            f"{row['shape']:>12} {row['params_ratio']:>8.3f} {row['state_ratio']:>16.3f} "
            f"{row['activation_ratio']:>15.3f} {row['tokens_per_s_est']:>10.0f} {tps_meas:>10.0f} "
            f"{row['throughput_ratio']:>6.2f}"
        )
    summary = {
        "baseline": "measured on this machine (tensor bytes, autograd saved tensors, train() tokens/s)",
        "shapes": results,
        "max_state_error": max(abs(r["state_ratio"] - 1) for r in results),
        "activation_ratio_range": [
            min(r["activation_ratio"] for r in results),
            max(r["activation_ratio"] for r in results),
        ],
        "throughput_ratio_range": [
            min(r["throughput_ratio"] for r in results),
            max(r["throughput_ratio"] for r in results),
        ],
    }
    print("RESULT " + json.dumps(summary))


if __name__ == "__main__":
    main()
