"""The battery generates each held-out answer once (issue 39): a longer greedy generation cut at the answer length is
the answer generated at that length, and left-padded batches answer as one prompt at a time does."""

from __future__ import annotations

import pytest

from trainteam.curation.formats import query
from trainteam.trainers.evaluation.battery import cut_answer, greedy_generations
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
