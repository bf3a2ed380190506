"""Tokenizer training, loading and the model factory."""

from __future__ import annotations

import subprocess
import sys

import pytest

from trainteam.core.errors import BadInput
from trainteam.trainers import ModelSpec, TokenizerConfig, build_model, load_tokenizer, train_tokenizer


def test_digits_split_one_per_token_and_roundtrip(tok):
    assert tok.tokenize("12+34=46") == ["1", "2", "+", "3", "4", "=", "4", "6"]
    ids = tok("hello 123", add_special_tokens=False)["input_ids"]
    assert tok.decode(ids) == "hello 123"
    assert tok.padding_side == "left" and tok.pad_token == "<pad>" and tok.eos_token == "</s>"


def test_without_digit_splitting_numbers_merge(tmp_path):
    texts = ["46 46 46 12 12 46"] * 50
    d = train_tokenizer(texts, TokenizerConfig(vocab_size=270, split_digits=False), tmp_path)
    assert "46" in load_tokenizer(d).tokenize("46")


def test_extra_tokens_get_embedding_rows(tmp_path, arith):
    train, _ = arith
    cfg = TokenizerConfig(vocab_size=280, extra_tokens=["<tool>", "</tool>"])
    tk = load_tokenizer(train_tokenizer((r["prompt"] for r in train), cfg, tmp_path))
    assert tk.tokenize("<tool>1</tool>") == ["<tool>", "1", "</tool>"]
    model = build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, vocab_size=100), tk)
    assert model.get_input_embeddings().weight.shape[0] >= len(tk)


def test_build_from_spec_and_local_folder(tok, tmp_path):
    spec = ModelSpec(hidden_size=32, num_layers=1, num_heads=2)
    m = build_model(spec, tok)
    assert m.config.hidden_size == 32 and m.config.vocab_size == len(tok)
    m.save_pretrained(tmp_path / "m")
    assert (tmp_path / "m" / "model.safetensors").is_file()
    again = build_model(ModelSpec(path=tmp_path / "m"), tok)
    assert all((a == b).all() for a, b in zip(m.state_dict().values(), again.state_dict().values(), strict=True))


def test_bad_inputs_name_the_field(tmp_path, tok):
    with pytest.raises(BadInput, match="model.path"):
        build_model(ModelSpec(path=tmp_path / "nowhere"), tok)
    with pytest.raises(BadInput, match="trust_remote_code"):
        build_model(ModelSpec(trust_remote_code=True), tok)
    with pytest.raises(BadInput, match="vocab_size"):  # the byte alphabet + 40 specials do not fit
        train_tokenizer(
            ["abc"], TokenizerConfig(vocab_size=270, special_tokens=[f"<s{i}>" for i in range(40)]), tmp_path / "t"
        )
    with pytest.raises(BadInput, match="not a tokenizer folder"):
        load_tokenizer(tmp_path)


def test_package_import_stays_light():
    code = "import sys, trainteam.trainers as t; t.TrainConfig; t.TrainReport; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
