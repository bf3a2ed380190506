"""Greedy exact-match accuracy on verifiable problems, in the exact training context."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainteam.core.errors import BadInput
from trainteam.trainers import budget
from trainteam.curation.formats import prompt_text
from trainteam.trainers.results import EvalResult


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
            budget.check("evaluation (exact match)")
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


def heldout_loss(model: Any, tokenizer, records: list[dict], *, batch_size: int = 64, completion_only: bool = True) -> float:
    """Mean token cross-entropy on ``records`` in the training context.

    Prompt/completion records score the completion tokens only (what SFT trains);
    ``{"text"}`` records score every token.
    """
    import torch

    from trainteam.trainers.method_data import record_text
    from trainteam.trainers.models import load_model

    if isinstance(model, (str, Path)):
        model = load_model(Path(model))
    if not records:
        raise BadInput("records: no records to score")
    model.eval()
    total, count = 0.0, 0
    pad = tokenizer.pad_token_id
    for start in range(0, len(records), batch_size):
        budget.check("evaluation (held-out loss)")
        rows, labels = [], []
        for r in records[start : start + batch_size]:
            ids = tokenizer(record_text(tokenizer, r), add_special_tokens=False)["input_ids"]
            lab = list(ids)
            if completion_only and r.get("prompt") is not None and r.get("completion") is not None:
                n_prompt = len(tokenizer(prompt_text(tokenizer, r["prompt"]), add_special_tokens=False)["input_ids"])
                lab[:n_prompt] = [-100] * n_prompt
            rows.append(ids)
            labels.append(lab)
        width = max(len(x) for x in rows)
        ids_t = torch.tensor([x + [pad] * (width - len(x)) for x in rows], device=model.device)
        mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in rows], device=model.device)
        lab_t = torch.tensor([x + [-100] * (width - len(x)) for x in labels], device=model.device)
        with torch.no_grad():
            logits = model(input_ids=ids_t, attention_mask=mask).logits[:, :-1].float()
        tgt = lab_t[:, 1:]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1), ignore_index=-100, reduction="sum")
        total += float(loss)
        count += int((tgt != -100).sum())
    return total / max(count, 1)
