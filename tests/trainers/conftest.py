"""Tiny shared fixtures: one digit-split tokenizer per session, one torch thread, small data."""

from __future__ import annotations

import pytest

from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic


@pytest.fixture(autouse=True)
def _one_thread():
    import torch

    torch.set_num_threads(1)


@pytest.fixture(scope="session")
def arith():
    train, ev = generate_arithmetic(ArithmeticConfig(n_train=600, n_eval=40, seed=1))
    return train, ev


@pytest.fixture(scope="session")
def tok_dir(tmp_path_factory, arith):
    from trainteam.trainers import TokenizerConfig, train_tokenizer

    train, _ = arith
    return train_tokenizer((r["prompt"] + r["completion"] for r in train), TokenizerConfig(vocab_size=300), tmp_path_factory.mktemp("tok"))


@pytest.fixture
def tok(tok_dir):
    from trainteam.trainers import load_tokenizer

    return load_tokenizer(tok_dir)


@pytest.fixture
def tiny(tok):
    from trainteam.trainers import ModelSpec, build_model

    return build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128), tok)
