"""Greedy exact-match accuracy on verifiable problems, in the exact training context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.errors import BadInput
from trainteam.trainers.formats import prompt_text
from trainteam.trainers.reports import EvalResult


def exact_match(model: Any, tokenizer, problems: list[dict], *, max_new_tokens: int = 8, batch_size: int = 64) -> EvalResult:
    """Generate greedily from ``prompt_text(prompt)`` and compare the text before EOS to ``completion``."""
    import torch

    from trainteam.trainers.models import load_model

    if isinstance(model, (str, Path)):
        model = load_model(Path(model))
    bad = next((i for i, p in enumerate(problems) if not {"prompt", "completion"} <= set(p)), None)
    if bad is not None:
        raise BadInput(f"problems[{bad}]: needs fields prompt and completion")
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    model.eval()
    samples, correct = [], 0
    try:
        for start in range(0, len(problems), batch_size):
            chunk = problems[start : start + batch_size]
            texts = [prompt_text(tokenizer, p["prompt"]) for p in chunk]
            enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(model.device)
            with torch.no_grad():
                out = model.generate(
                    **enc, max_new_tokens=max_new_tokens, do_sample=False,
                    pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                )
            gen = out[:, enc["input_ids"].shape[1] :]
            for p, ids in zip(chunk, gen):
                answer = tokenizer.decode(ids, skip_special_tokens=True).strip()
                ok = answer == str(p["completion"]).strip()
                correct += ok
                samples.append({"prompt": p["prompt"], "expected": str(p["completion"]), "got": answer, "correct": ok})
    finally:
        tokenizer.padding_side = side
    n = len(problems)
    return EvalResult(accuracy=correct / n if n else 0.0, n=n, correct=correct, samples=samples)
