"""The battery generates each held-out answer once (issue 39): a longer greedy generation cut at the answer length is
the answer generated at that length, and left-padded batches answer as one prompt at a time does; the determinism
check reads the answers again in one teacher-forced pass, and says what decoding them again says."""

from __future__ import annotations

import pytest

from trainteam.curation.formats import query
from trainteam.trainers.evaluation.battery import cut_answer, greedy_agreement, greedy_generations
from trainteam.trainers.training.models import load_model
from trainteam.trainers.training.tokenizer import load_tokenizer


@pytest.mark.parametrize("which", ["tiny_checkpoint", "random_checkpoint"])  # stops at EOS / rambles on
def test_one_generation_serves_every_length_and_batching_changes_nothing(which, request, addition_data):
    folder = request.getfixturevalue(which)
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    _, held = addition_data
    prompts = [query(r) for r in held[:12]]
    longer = greedy_generations(model, tokenizer, prompts, max_new_tokens=12, batch_size=12)
    for n in (2, 4):
        direct = greedy_generations(model, tokenizer, prompts, max_new_tokens=n, batch_size=12)
        assert [cut_answer(g, n, tokenizer) for g in longer] == direct
    one_by_one = [greedy_generations(model, tokenizer, [p], max_new_tokens=12, batch_size=1)[0] for p in prompts]
    assert one_by_one == longer
    if which == "tiny_checkpoint":
        assert all(g["eos"] for g in longer)  # the trained model stops: the cut keeps its EOS


@pytest.mark.parametrize("which", ["tiny_checkpoint", "random_checkpoint"])
def test_greedy_agreement_says_what_decoding_again_says(which, request, addition_data):
    """The answers as generated agree; decoded again one prompt at a time they are the same (deterministic both
    ways); an answer with one token changed, run on past its stop, or claiming a stop, no longer agrees, row by row."""
    folder = request.getfixturevalue(which)
    model, tokenizer = load_model(folder), load_tokenizer(folder)
    _, held = addition_data
    prompts = [query(r) for r in held[:10]]
    gens = greedy_generations(model, tokenizer, prompts, max_new_tokens=10, batch_size=10)
    again = [greedy_generations(model, tokenizer, [p], max_new_tokens=10, batch_size=1)[0] for p in prompts]
    assert [(g["ids"], g["eos"]) for g in again] == [(g["ids"], g["eos"]) for g in gens]
    assert greedy_agreement(model, tokenizer, prompts, gens) == 1.0
    changed = [
        dict(g, ids=[(g["ids"][0] + 1) % len(tokenizer), *g["ids"][1:]]) if i < 3 else g for i, g in enumerate(gens)
    ]
    assert greedy_agreement(model, tokenizer, prompts, changed) == pytest.approx(0.7)
    stopped = [g for g in gens if g["eos"]]
    if stopped:  # the trained model stops at EOS: an answer that runs on past it was not its greedy answer
        i = gens.index(stopped[0])
        ran_on = [dict(g, eos=False, ids=[*g["ids"], g["ids"][0]]) if j == i else g for j, g in enumerate(gens)]
        assert greedy_agreement(model, tokenizer, prompts, ran_on) == pytest.approx(0.9)
    else:  # the random model rambles to the length: claiming it stopped there is not its greedy answer
        claimed = [dict(g, eos=True) if j == 0 else g for j, g in enumerate(gens)]
        assert greedy_agreement(model, tokenizer, prompts, claimed) == pytest.approx(0.9)
