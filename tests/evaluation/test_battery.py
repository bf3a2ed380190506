"""The eval battery on tiny trained models: each metric measured, and cross-checked."""

from __future__ import annotations

import math

import pytest
from model_fixtures import make_model, make_tokenizer, train_steps

from trainteam.core.errors import BadInput
from trainteam.trainers.evaluation.battery import (
    DEFAULT_BATTERIES,
    BatterySpec,
    default_battery,
    exact_match,
    greedy_generations,
    heldout_loss,
    run_battery,
)


@pytest.fixture(scope="module")
def loaded(tiny_checkpoint):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_checkpoint, padding_side="left")
    return AutoModelForCausalLM.from_pretrained(tiny_checkpoint).eval(), tok


def test_heldout_loss_counts_answer_tokens_like_training(loaded, addition_data):
    """One record: our loss equals the model's own loss with the prompt masked out."""
    import torch

    from trainteam.curation.formats import completion_text, prompt_text

    model, tok = loaded
    rec = addition_data[1][0]
    p = tok(prompt_text(tok, rec["prompt"]), add_special_tokens=False)["input_ids"]
    c = tok(completion_text(tok, rec["completion"]), add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        ref = model(input_ids=torch.tensor([p + c]), labels=torch.tensor([[-100] * len(p) + c])).loss.item()
    assert heldout_loss(model, tok, [rec]) == pytest.approx(ref, rel=1e-5)
    got = run_battery(model, tok, [rec], stage="pretrain", spec=BatterySpec(metrics=["heldout_loss"])).metrics
    assert got["heldout_loss"] == pytest.approx(ref, rel=1e-5)
    assert got["perplexity"] == pytest.approx(math.exp(ref), rel=1e-5)


def test_training_lowers_heldout_loss(tiny_checkpoint, random_checkpoint, addition_data):
    held = addition_data[1]
    spec = BatterySpec(metrics=["heldout_loss"])
    trained = run_battery(tiny_checkpoint, None, held, stage="pretrain", spec=spec).metrics
    untrained = run_battery(random_checkpoint, None, held, stage="pretrain", spec=spec).metrics
    assert trained["heldout_loss"] < 0.5 * untrained["heldout_loss"]
    assert trained["perplexity"] < untrained["perplexity"]


def test_post_train_battery_on_trained_model(tiny_checkpoint, addition_data):
    """Default post-train battery: the trained model answers digits then EOS, deterministically."""
    from trainteam.trainers.training.tokenizer import load_tokenizer

    held = addition_data[1]
    res = run_battery(tiny_checkpoint, tiny_checkpoint, held, stage="sft")
    assert res.kind == "post_train" and res.n_eval == len(held)
    m = res.metrics
    assert set(m) >= {"heldout_loss", "perplexity", "exact_match", "format_adherence", "determinism", "repetition_rate"}
    assert m["format_adherence"] == 1.0
    assert m["determinism"] == 1.0
    assert m["repetition_rate"] == 0.0
    tok = load_tokenizer(tiny_checkpoint)
    direct = exact_match(tiny_checkpoint, tok, held)
    assert m["exact_match"] == direct.accuracy
    assert res.details["exact_match"]["correct"] == direct.correct
    # The generations the reliability checks read are the answers exact match scored.
    from trainteam.trainers.training.models import load_model

    gens = greedy_generations(
        load_model(tiny_checkpoint), tok, [p["prompt"] for p in held], max_new_tokens=8, batch_size=7
    )
    assert [g["text"] for g in gens] == [s["got"] for s in direct.samples]


def test_reliability_checks_catch_a_degenerate_model(addition_data):
    """A model trained to loop ("7777…") breaks format and is flagged as repetitive."""
    train, held = addition_data
    tok = make_tokenizer([r["prompt"] + r["completion"] for r in train])
    model = make_model(tok, seed=3)
    train_steps(model, tok, [dict(r, completion="7" * 24) for r in train[:200]], steps=40)
    res = run_battery(model, tok, held, stage="mid_train")
    assert res.metrics["repetition_rate"] == 1.0
    assert res.metrics["format_adherence"] == 0.0
    assert res.details["format_violations"][0].startswith("7777")


def test_stage_defaults_and_bad_stage():
    assert set(DEFAULT_BATTERIES) == {"pretrain", "mid_train", "long_context", "post_train"}
    assert default_battery("grpo").metrics == DEFAULT_BATTERIES["post_train"].metrics
    assert "format_adherence" not in default_battery("pretrain").metrics
    assert (
        default_battery("long_context").repetition_max_new_tokens
        > default_battery("pretrain").repetition_max_new_tokens
    )
    with pytest.raises(BadInput, match="stage 'warmup'"):
        default_battery("warmup")


def test_bad_records_name_the_field(loaded):
    model, tok = loaded
    with pytest.raises(BadInput, match=r"records\[1\]"):
        heldout_loss(model, tok, [{"text": "1+1=2"}, {"question": "x"}])


def test_eval_set_is_decontaminated_against_training_data(tiny_checkpoint, addition_data):
    """Eval problems that leaked into training are removed before measuring, and reported."""
    train, held = addition_data
    leaked = held[:5]
    res = run_battery(
        tiny_checkpoint,
        None,
        held,
        stage="sft",
        spec=BatterySpec(metrics=["exact_match"]),
        train_records=list(train) + [{"text": f"{r['prompt']} {r['completion']}"} for r in leaked],
    )
    assert res.n_eval == len(held) - 5
    assert res.details["exact_match"]["n"] == len(held) - 5
    report = res.decontamination
    assert report["checked"] and report["removed"] == 5
    assert sorted(report["contaminated"]) == sorted(f"eval/{r['id']}" for r in leaked)
    clean = run_battery(
        tiny_checkpoint, None, held, stage="sft", spec=BatterySpec(metrics=["exact_match"]), train_records=train
    )
    assert clean.n_eval == len(held) and clean.decontamination["removed"] == 0
