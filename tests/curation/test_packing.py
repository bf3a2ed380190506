"""Packing: fixed windows round-trip the tokens; SFT rows are what TRL's padding-free collator takes."""

import pytest

from trainteam.core.errors import BadInput
from trainteam.curation.demo import ArithmeticConfig, generate_arithmetic
from trainteam.curation.packing import pack_sft, pack_texts, pack_token_stream, tokenize_sft
from trainteam.curation.synthetic import TextWriter


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    import torch

    torch.set_num_threads(1)
    from trainteam.trainers.training.config import TokenizerConfig
    from trainteam.trainers.training.tokenizer import load_tokenizer, train_tokenizer

    w = TextWriter(seed=4)
    texts = [w.text(300) for _ in range(50)] + ["12+34=46 7*8=56 99-1=98"] * 5
    path = train_tokenizer(texts, TokenizerConfig(vocab_size=400), tmp_path_factory.mktemp("tok"))
    return load_tokenizer(path)


def test_token_stream_round_trips_with_eos_separators():
    seqs = [[1, 2, 3], [4], [], [5, 6, 7, 8, 9]]
    rows = list(pack_token_stream(seqs, 4, eos_id=0, keep_remainder=True))
    assert all(len(r) == 4 for r in rows[:-1])
    assert sum(rows, []) == [1, 2, 3, 0, 4, 0, 0, 5, 6, 7, 8, 9, 0]
    full = list(pack_token_stream(seqs, 4, eos_id=0))
    assert full == rows[:-1]  # without the remainder: whole windows only
    with pytest.raises(BadInput, match="window"):
        list(pack_token_stream(seqs, 1, eos_id=0))


def test_pack_texts_decodes_back_to_the_documents(tokenizer):
    w = TextWriter(seed=9)
    docs = [w.text(120) for _ in range(7)]
    rows = list(pack_texts(docs, tokenizer, 32, batch_size=3, keep_remainder=True))
    assert all(len(r) == 32 for r in rows[:-1])
    flat = sum(rows, [])
    eos = tokenizer.eos_token_id
    pieces, cur = [], []
    for t in flat:
        if t == eos:
            pieces.append(tokenizer.decode(cur))
            cur = []
        else:
            cur.append(t)
    assert pieces == docs


def test_sft_packing_feeds_trl_padding_free_collator(tokenizer):
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    train, _ = generate_arithmetic(ArithmeticConfig(n_train=12, n_eval=2))
    single = tokenize_sft(train, tokenizer)
    # loss only on the answer and its EOS
    first = single[0]
    answer = [t for t, lab in zip(first["input_ids"], first["labels"], strict=True) if lab != -100]
    assert tokenizer.decode(answer) == train[0]["completion"] + tokenizer.eos_token
    packed = pack_sft(train, tokenizer, seq_length=32)
    assert set(packed.column_names) == {"input_ids", "labels", "seq_lengths"}
    assert len(packed) < len(train)  # several problems share a row
    assert sum(sum(r) for r in packed["seq_lengths"]) == sum(len(s["input_ids"]) for s in single)
    batch = DataCollatorForLanguageModeling(pad_token_id=tokenizer.pad_token_id, padding_free=True)(
        [packed[0], packed[1]]
    )
    pos = batch["position_ids"][0].tolist()
    starts = [i for i, p in enumerate(pos) if p == 0]
    lengths = packed[0]["seq_lengths"] + packed[1]["seq_lengths"]
    assert [
        b - a for a, b in zip(starts, starts[1:] + [len(pos)], strict=True)
    ] == lengths  # positions restart per example
    assert (batch["labels"][0] != -100).sum().item() > 0
