"""Model fixtures shared by the trainers' rooms (a pytest plugin: tests/conftest.py names it).

A digit-split tokenizer and tiny models built by the trainers' own factories (``tok``, ``tiny``), and a tiny
Llama trained a few steps on one-digit addition built with transformers + tokenizers directly
(``tiny_checkpoint``), so the evaluation tests do not depend on the trainers' factories. One torch thread.
"""

from __future__ import annotations

from pathlib import Path

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
    return train_tokenizer(
        (r["prompt"] + r["completion"] for r in train), TokenizerConfig(vocab_size=300), tmp_path_factory.mktemp("tok")
    )


@pytest.fixture
def tok(tok_dir):
    from trainteam.trainers import load_tokenizer

    return load_tokenizer(tok_dir)


@pytest.fixture
def tiny(tok):
    from trainteam.trainers import ModelSpec, build_model

    return build_model(ModelSpec(hidden_size=32, num_layers=1, num_heads=2, max_position_embeddings=128), tok)


def make_tokenizer(texts: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
    )


def make_model(tok, hidden: int = 32, seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        tie_word_embeddings=True,
    )
    return LlamaForCausalLM(cfg)


def train_steps(model, tok, records: list[dict], steps: int, lr: float = 1e-2, batch: int = 32) -> list[float]:
    """A few optimizer steps, loss on the answer only (as the trainers do)."""
    import torch

    from trainteam.curation.formats import completion_text, prompt_text

    rows = []
    for r in records:
        p = tok(prompt_text(tok, r["prompt"]), add_special_tokens=False)["input_ids"]
        c = tok(completion_text(tok, r["completion"]), add_special_tokens=False)["input_ids"]
        rows.append((p + c, [-100] * len(p) + c))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(0)
    losses = []
    model.train()
    for _ in range(steps):
        idx = torch.randint(len(rows), (batch,), generator=g).tolist()
        width = max(len(rows[i][0]) for i in idx)
        ids = torch.full((batch, width), tok.pad_token_id)
        labels = torch.full((batch, width), -100)
        mask = torch.zeros((batch, width), dtype=torch.long)
        for j, i in enumerate(idx):
            x, y = rows[i]
            ids[j, : len(x)] = torch.tensor(x)
            labels[j, : len(y)] = torch.tensor(y)
            mask[j, : len(x)] = 1
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    model.eval()
    return losses


@pytest.fixture(scope="session")
def addition_data():
    train, held = generate_arithmetic(ArithmeticConfig(task="addition", max_operand=9, n_train=400, n_eval=24, seed=1))
    return train, held


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, addition_data) -> Path:
    """A checkpoint folder (safetensors + tokenizer) trained 120 steps: it emits digits then EOS."""
    import torch

    torch.set_num_threads(1)
    train, _ = addition_data
    tok = make_tokenizer([r["prompt"] + r["completion"] for r in train])
    model = make_model(tok)
    losses = train_steps(model, tok, train, steps=120)
    out = tmp_path_factory.mktemp("ckpt") / "tiny-addition"
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    (out / "train_losses.txt").write_text("\n".join(f"{x:.5f}" for x in losses))
    return out


@pytest.fixture(scope="session")
def random_checkpoint(tmp_path_factory, addition_data) -> Path:
    """The same architecture, untrained (random init)."""
    train, _ = addition_data
    tok = make_tokenizer([r["prompt"] + r["completion"] for r in train])
    model = make_model(tok, seed=7)
    out = tmp_path_factory.mktemp("ckpt") / "tiny-random"
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out
