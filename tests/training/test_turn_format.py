"""The chat template a run uses, decided in one place (``load_tokenizer``, trainers/training/tokenizer.py) and said
in one line (``template_choice``, trainers/training/chat_templates.py), on tiny local tokenizers: no model.

A base Gemma's tokenizer carries no template but its vocabulary holds ``<start_of_turn>`` / ``<end_of_turn>``: it
gets TRL's gemma3 template (Google's Gemma 3 turns) and ``<end_of_turn>`` as its EOS. A tokenizer with its own
template keeps it; one without a family's turn tokens stays plain; a named template replaces the choice.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from trainteam.core.errors import BadInput
from trainteam.curation import formats as F
from trainteam.trainers.training.chat_templates import apply_chat_template, template_choice
from trainteam.trainers.training.config import TokenizerConfig
from trainteam.trainers.training.tokenizer import load_tokenizer, train_tokenizer, trl_template_path

GEMMA_TURNS = ["<start_of_turn>", "<end_of_turn>"]
ROW = {"messages": [{"role": "system", "content": "Answer briefly."},
                    {"role": "user", "content": "Write the second of August, 1990 as an ISO date."},
                    {"role": "assistant", "content": "1990-08-02"}]}
TEXTS = [m["content"] for m in ROW["messages"]] * 20


def _folder(tmp_path: Path, name: str, specials: list[str], template: str | None = None) -> Path:
    """A saved byte-level BPE tokenizer with ``specials`` (and ``template``, when given) and nothing else."""
    config = TokenizerConfig(vocab_size=400, special_tokens=["<pad>", "<s>", "</s>", "<unk>", *specials])
    out = train_tokenizer(TEXTS, config, tmp_path / name)
    if template is not None:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(str(out))  # as saved, without load_tokenizer's choice
        tok.chat_template = template
        tok.save_pretrained(str(out))
    return out


@pytest.fixture
def gemma_vocab(tmp_path) -> Path:
    return _folder(tmp_path, "gemma-like", GEMMA_TURNS)


def test_a_base_with_gemma_turn_tokens_gets_gemmas_template_and_its_end_of_turn_as_eos(gemma_vocab):
    tok = load_tokenizer(gemma_vocab)
    assert tok.chat_template == trl_template_path("gemma3").read_text(encoding="utf-8")
    assert tok.eos_token == "<end_of_turn>" and F.prompt_format(tok) == "chat"
    prompt = F.prompt_text(tok, F.query(ROW), "chat")
    assert prompt == ("<s><start_of_turn>user\nAnswer briefly.\n\nWrite the second of August, 1990 as an ISO date."
                      "<end_of_turn>\n<start_of_turn>model\n")
    ids, full = F.example_ids(tok, ROW, "chat")
    answer = full[len(ids):]  # what the trainer teaches: the answer closed by the EOS, which generation stops at
    assert full[: len(ids)] == ids and tok.eos_token_id in answer
    assert tok.decode(answer[: answer.index(tok.eos_token_id)]) == "1990-08-02"
    note = template_choice(gemma_vocab, tok)
    assert note.startswith("carries no chat template (a base model): trainteam trains, evaluates and serves it with "
                           "Gemma's own turn format (TRL's gemma3 template")
    assert "<end_of_turn> is the EOS" in note


def test_the_saved_tokenizer_carries_the_choice(gemma_vocab, tmp_path):
    """What the trainer saves with a checkpoint reloads with the same template and EOS, and says it carries it."""
    tok = load_tokenizer(gemma_vocab)
    tok.save_pretrained(str(tmp_path / "ckpt"))
    assert F.folder_prompt_format(tmp_path / "ckpt") == "chat" and F.folder_prompt_format(gemma_vocab) == "plain"
    again = load_tokenizer(tmp_path / "ckpt")
    assert again.chat_template == tok.chat_template and again.eos_token == "<end_of_turn>"
    assert template_choice(tmp_path / "ckpt", again) == "has a chat template: chat rows train and evaluate through it"


def test_a_models_own_template_is_kept_and_a_vocabulary_without_turn_tokens_stays_plain(tmp_path):
    own = "{% for m in messages %}<start_of_turn>{{ m['content'] }}<end_of_turn>{% endfor %}"
    tok = load_tokenizer(_folder(tmp_path, "own", GEMMA_TURNS, template=own))
    assert tok.chat_template == own and tok.eos_token == "</s>"
    plain = _folder(tmp_path, "plain", [])
    tok = load_tokenizer(plain)
    assert F.prompt_format(tok) == "plain" and tok.eos_token == "</s>"
    assert template_choice(plain, tok).startswith("no chat template: prompts are plain")


def test_a_named_template_replaces_the_choice_and_one_the_vocabulary_cannot_write_is_refused(gemma_vocab):
    tok = load_tokenizer(gemma_vocab)
    note = template_choice(gemma_vocab, tok, "gemma3")
    assert note.startswith("TRL's gemma3 chat template replaces the model's own: it writes no tool calls")
    assert tok.eos_token == "<end_of_turn>"
    with pytest.raises(BadInput, match=r"TRL's qwen2_5 chat template needs the tokens <\|im_end\|>, <\|im_start\|>"):
        apply_chat_template(load_tokenizer(gemma_vocab), "qwen2_5")


def test_a_named_template_without_a_family_end_gives_the_folders_eos_back(gemma_vocab, tmp_path):
    jinja = tmp_path / "simple.jinja"
    jinja.write_text("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                     "{% if add_generation_prompt %}assistant: {% endif %}")
    tok = load_tokenizer(gemma_vocab)
    assert "replaces the model's own" in apply_chat_template(tok, str(jinja))
    assert tok.eos_token == "</s>"


def test_gemma_turns_on_a_vocabulary_without_them_are_refused(tmp_path):
    with pytest.raises(BadInput, match=r"gemma3 chat template needs the tokens <end_of_turn>, <start_of_turn>"):
        apply_chat_template(load_tokenizer(_folder(tmp_path, "plain", [])), "gemma3")
