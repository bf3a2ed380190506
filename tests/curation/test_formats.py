"""One rendering of a prompt for training, evaluation, sampling and serving (``curation/formats.py``).

On the real instruct model (SmolLM2-135M-Instruct, imported from its GGUF file by the
``real_model`` fixture) rows go through its own chat template; the project's from-scratch
tokenizers keep the plain ``bos + prompt`` format.
"""

from __future__ import annotations

import pytest

from trainteam.curation import formats as F

PAIR = {"prompt": "What is 12 plus 30? Answer with the number only.", "completion": "42"}
CHAT = {
    "messages": [
        {"role": "system", "content": "You add numbers."},
        {"role": "user", "content": "What is 1 plus 1?"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "And 2 plus 2?"},
        {"role": "assistant", "content": "4"},
    ]
}


@pytest.fixture(scope="module")
def chat_tok(real_model):
    from trainteam.trainers.training.tokenizer import load_tokenizer

    return load_tokenizer(real_model)


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    from trainteam.trainers.training.config import TokenizerConfig
    from trainteam.trainers.training.tokenizer import load_tokenizer, train_tokenizer

    out = train_tokenizer(["1+1=2", "12+34=46"] * 20, TokenizerConfig(vocab_size=270), tmp_path_factory.mktemp("tok"))
    return load_tokenizer(out)


def test_row_kinds_and_examples():
    assert [F.row_kind(r) for r in (PAIR, CHAT, {"text": "x"}, {"prompt": "p", "chosen": "a", "rejected": "b"})] == [
        "pair",
        "chat",
        "text",
        "preference",
    ]
    assert F.row_kind({"text": "x", "messages": None}) == "text"  # a column a table fills with None
    prompt, reference = F.example(CHAT)
    assert reference == "4" and prompt[-1] == {"role": "user", "content": "And 2 plus 2?"} and len(prompt) == 4
    assert [c["content"] for _, c in F.turns(CHAT)] == ["2", "4"]
    assert F.completion_content([{"role": "assistant", "content": "7"}]) == "7" and F.completion_content("7") == "7"
    with pytest.raises(ValueError, match="no assistant turn"):
        F.example({"messages": [{"role": "user", "content": "hi"}]})


def test_the_real_model_reads_its_chat_template(chat_tok):
    assert F.prompt_format(chat_tok) == "chat"
    text = F.prompt_text(chat_tok, PAIR["prompt"], "chat")
    assert text.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nWhat is 12 plus 30?" in text
    prompt, full = F.example_ids(chat_tok, PAIR, "chat")
    assert full[: len(prompt)] == prompt
    assert chat_tok.decode(full[len(prompt) :]).startswith("42<|im_end|>")
    with_system = F.prompt_text(chat_tok, F.query({**PAIR, "system": "Be brief."}), "chat")
    assert "<|im_start|>system\nBe brief.<|im_end|>" in with_system


def test_sft_rows_are_trls_conversational_prompt_completion(chat_tok, real_model, tmp_path):
    """A conversation with two replies gives two rows; TRL tokenizes each prompt exactly as
    ``formats.prompt_ids`` does, so the context trained on is the context evaluated."""
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    from trainteam.trainers.methods.sft import sft_dataset
    from trainteam.trainers.training.models import load_model

    ds = sft_dataset(
        chat_tok,
        Dataset.from_list(
            [CHAT, {"messages": [{"role": "user", "content": PAIR["prompt"]}, {"role": "assistant", "content": "42"}]}]
        ),
    )
    assert len(ds) == 3 and ds[1]["completion"] == [{"role": "assistant", "content": "4"}]
    trainer = SFTTrainer(
        model=load_model(real_model),
        processing_class=chat_tok,
        train_dataset=ds,
        args=SFTConfig(output_dir=str(tmp_path), max_length=None, report_to=[], bf16=False, use_cpu=True),
    )
    for row, tokenized in zip(ds, trainer.train_dataset, strict=True):
        expected = F.prompt_ids(chat_tok, row["prompt"], "chat")
        n_prompt = next(i for i, label in enumerate(tokenized["labels"]) if label != -100)
        assert tokenized["input_ids"][:n_prompt] == expected  # the loss starts at the answer
        assert chat_tok.decode(tokenized["input_ids"][n_prompt:]).startswith(row["completion"][0]["content"])


def test_plain_tokenizers_keep_the_separator_format(tiny_tokenizer):
    assert F.prompt_format(tiny_tokenizer) == "plain"
    assert F.prompt_text(tiny_tokenizer, "12+34=") == (tiny_tokenizer.bos_token or tiny_tokenizer.eos_token) + "12+34="
    assert F.text_of(tiny_tokenizer, {"prompt": "1+1=", "completion": "2"}, "plain").endswith(
        "1+1=2" + tiny_tokenizer.eos_token
    )


def test_folder_format_is_read_from_the_tokenizer_files(real_model, tmp_path):
    assert F.folder_prompt_format(real_model) == "chat"
    (tmp_path / "tokenizer_config.json").write_text("{}")
    assert F.folder_prompt_format(tmp_path) == "plain"
