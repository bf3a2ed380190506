"""The Ollama part of ``models export``: a real tokenizer's chat template, probed into a ``TurnFormat``, written
as a Modelfile, and the Modelfile's TEMPLATE executed by Go's own text/template (tests/go_template.py).

Three template shapes on SmolLM2-135M-Instruct's real tokenizer: its own ChatML with a default system message,
a ChatML without one (Qwen2-like) and a Llama-3-style one with a BOS. For each, 20 sample conversations come out
byte-identical from ``apply_chat_template(..., add_generation_prompt=True)`` and from the Modelfile as Ollama
renders it (its SYSTEM put first when a conversation has no system message). No mocks.
"""

from __future__ import annotations

import copy

import pytest
from go_template import render_like_ollama
from real_model import ensure_real_model

from trainteam.core.errors import BadInput
from trainteam.trainers.export.modelfile import (
    build_modelfile,
    go_template,
    modelfile_value,
    ollama_modelfile,
    read_modelfile,
)
from trainteam.trainers.export.turn_format import (
    check_turn_format,
    probe_turn_format,
    render_template,
    sample_conversations,
    verified_turn_format,
)

SMOLLM2_SYSTEM = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"
CHATML_NO_DEFAULT = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA3_STYLE = (
    "{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'"
    " + message['content'] + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)
LLAMA3_TOKENS = ("<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
# Literal template text holding Go's delimiters: it must reach the prompt as text, not as a Go action.
BRACED_ROLES = (
    "{% for message in messages %}{{ '{{' + message['role'] + '}}: ' + message['content'] + '\\n\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '{{assistant}}: ' }}{% endif %}"
)
# Templates the format cannot describe, each for its own reason.
FIRST_USER_DIFFERS = (
    "{% for message in messages %}{% if loop.first and message['role'] == 'user' %}{{ '[FIRST] ' }}{% endif %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
LLAMA2_SYSTEM_IN_FIRST_USER = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '<s>[INST] ' + content + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' ' + content + ' </s>' }}{% endif %}{% endfor %}"
)
NO_SYSTEM_ROLE = (
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for message in messages %}{{ '<start_of_turn>' + message['role'] + '\\n' + message['content'] }}"
    "{{ '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
TRIMS_CONTENT = CHATML_NO_DEFAULT.replace("message['content']", "(message['content'] | trim)")


@pytest.fixture(scope="module")
def smollm2():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(ensure_real_model()))


def with_template(tokenizer, template: str | None, tokens: tuple[str, ...] = (), **special: str):
    """A copy of ``tokenizer`` with ``template`` as its chat template, ``tokens`` added as special tokens."""
    copied = copy.deepcopy(tokenizer)
    if tokens:
        copied.add_tokens(list(tokens), special_tokens=True)
    if special:
        copied.add_special_tokens(special)
    copied.chat_template = template
    return copied


def assert_ollama_renders_like_the_template(tokenizer, write_bos: bool = True):
    """Probe, check, write the Modelfile, read its TEMPLATE back and run it in Go on the 20 conversations."""
    fmt, check = verified_turn_format(tokenizer)
    assert (check.conversations, check.identical, check.first_mismatch) == (20, 20, None)
    modelfile = ollama_modelfile(tokenizer, "model.gguf", write_bos=write_bos)  # what the export writes
    assert modelfile.text == build_modelfile(fmt, "model.gguf", write_bos=write_bos).text
    assert modelfile.check == check and modelfile.check_line.startswith("Modelfile: 20 of 20 sample conversations")
    read_back = dict(read_modelfile(modelfile.text))
    assert read_back["template"] == modelfile.template and read_back["from"] == "./model.gguf"
    conversations = sample_conversations(n=20, seed=0)
    expected = [render_template(tokenizer, messages, add_generation_prompt=True) for messages in conversations]
    if not write_bos:
        expected = [text.removeprefix(fmt.bos) for text in expected]
    rendered = render_like_ollama(read_back["template"], conversations, read_back.get("system"))
    mismatched = [i for i, (want, got) in enumerate(zip(expected, rendered, strict=True)) if want != got]
    assert not mismatched, f"conversation {mismatched[0]}: {expected[mismatched[0]]!r} != {rendered[mismatched[0]]!r}"
    return fmt, modelfile


def test_the_samples_cover_the_awkward_contents():
    conversations = sample_conversations(n=20, seed=0)
    assert conversations == sample_conversations(n=20, seed=0)
    texts = [m["content"] for messages in conversations for m in messages]
    assert {len([m for m in messages if m["role"] == "user"]) for messages in conversations} == {1, 2, 3, 4}
    assert sum(messages[0]["role"] == "system" for messages in conversations) == 10
    assert all(messages[-1]["role"] == "user" for messages in conversations)
    for needle in ("\n", "{{", '"', "日本語", "\t"):
        assert any(needle in text for text in texts), needle
    assert any(text != text.strip() for text in texts)


def test_smollm2_template_becomes_a_modelfile_ollama_renders_byte_for_byte(smollm2):
    fmt, modelfile = assert_ollama_renders_like_the_template(smollm2)
    assert fmt.default_system == SMOLLM2_SYSTEM and fmt.bos == ""
    assert fmt.user.prefix == "<|im_start|>user\n" and fmt.assistant.suffix == "<|im_end|>\n"
    assert fmt.generation_prompt == "<|im_start|>assistant\n" and fmt.end_of_turn == ("<|im_end|>",)
    assert modelfile.system == SMOLLM2_SYSTEM and modelfile.stops == ("<|im_end|>",)
    lines = modelfile.text.splitlines()
    assert "FROM ./model.gguf" in lines and 'PARAMETER stop "<|im_end|>"' in lines
    assert f'SYSTEM """{SMOLLM2_SYSTEM}"""' in lines
    assert SMOLLM2_SYSTEM not in modelfile.template  # Ollama's SYSTEM puts it in, not the template


def test_chatml_without_a_default_system(smollm2):
    fmt, modelfile = assert_ollama_renders_like_the_template(with_template(smollm2, CHATML_NO_DEFAULT))
    assert fmt.default_system is None and modelfile.system is None
    assert "SYSTEM" not in modelfile.text and 'PARAMETER stop "<|im_end|>"' in modelfile.text.splitlines()


@pytest.fixture(scope="module")
def llama3(smollm2):
    tokens = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}
    return with_template(smollm2, LLAMA3_STYLE, LLAMA3_TOKENS, **tokens)


def test_llama3_style_template_with_a_bos(llama3):
    fmt, modelfile = assert_ollama_renders_like_the_template(llama3)
    assert fmt.bos == "<|begin_of_text|>" and fmt.default_system is None
    assert fmt.system.prefix == "<|start_header_id|>system<|end_header_id|>\n\n"
    assert fmt.assistant.suffix == "<|eot_id|>" and fmt.end_of_turn == ("<|eot_id|>",)
    assert modelfile.stops == ("<|eot_id|>", "<|end_of_text|>")  # the end of turn, then the EOS
    assert modelfile.template.startswith("<|begin_of_text|>")


def test_the_bos_can_be_left_to_the_gguf_tokenizer(llama3):
    fmt, modelfile = assert_ollama_renders_like_the_template(llama3, write_bos=False)
    assert "<|begin_of_text|>" not in modelfile.template


def test_go_delimiters_in_contents_and_in_template_text_stay_text(smollm2):
    braced = with_template(smollm2, BRACED_ROLES)
    fmt, modelfile = assert_ollama_renders_like_the_template(braced)
    assert fmt.user.prefix == "{{user}}: " and '{{ "{{user}}:" }}' in modelfile.template
    asked = "{{ .System }} and {{ range .Messages }}x{{ end }}"
    messages = [{"role": "system", "content": "the system text"}, {"role": "user", "content": asked}]
    [rendered] = render_like_ollama(modelfile.template, [messages], None)  # .System is set: Go would expand it
    assert rendered == render_template(braced, messages)
    assert rendered.endswith(f"{{{{user}}}}: {asked}\n\n{{{{assistant}}}}: ") and rendered.count("the system text") == 1


def test_an_assistant_message_last_is_left_open_for_ollama_to_continue(smollm2):
    fmt, modelfile = assert_ollama_renders_like_the_template(smollm2)
    messages = [{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi, I am"}]
    [rendered] = render_like_ollama(modelfile.template, [messages], modelfile.system)
    assert rendered == smollm2.apply_chat_template(messages, tokenize=False, continue_final_message=True)


@pytest.mark.parametrize(
    ("template", "problem"),
    [
        (None, "has no chat template"),
        (FIRST_USER_DIFFERS, "first user turn"),
        (LLAMA2_SYSTEM_IN_FIRST_USER, "first user turn after a system message"),
        (NO_SYSTEM_ROLE, "System role not supported"),
        (TRIMS_CONTENT, "sample conversations differently"),
    ],
    ids=["no-template", "first-user-prefix", "system-inside-first-user", "refuses-system", "trims-content"],
)
def test_a_template_the_format_cannot_describe_is_refused_in_one_line(smollm2, template, problem):
    with pytest.raises(BadInput) as refused:
        verified_turn_format(with_template(smollm2, template))
    message = str(refused.value)
    assert "\n" not in message and problem in message and "export --format gguf or hf instead" in message


def test_the_check_shows_the_first_mismatch(smollm2):
    trimming = with_template(smollm2, TRIMS_CONTENT)
    check = check_turn_format(trimming, probe_turn_format(trimming), sample_conversations())
    assert not check.ok and 0 < check.identical < check.conversations == 20
    assert check.first_mismatch is not None and check.first_mismatch.startswith("conversation ")


def test_modelfile_values_read_back_unchanged_or_are_refused():
    for value in ['ends with a quote"', '"starts with one', "two\nlines", "  spaced  ", 'a "" b']:
        quoted = modelfile_value(value, "the value")
        assert read_modelfile(f"SYSTEM {quoted}\n") == [("system", value)]
    with pytest.raises(BadInput, match="no escapes"):
        modelfile_value('a line ending in three quotes"""\nand more', "the default system message")
    with pytest.raises(BadInput, match="no escapes"):
        modelfile_value("a control character \x07", "the default system message")


def test_template_text_that_a_modelfile_cannot_hold_goes_into_go_string_actions(smollm2):
    fmt = probe_turn_format(with_template(smollm2, CHATML_NO_DEFAULT))
    odd = fmt.model_copy(update={"generation_prompt": 'Assistant """\u0007 ünïcode\n'})
    template = go_template(odd)
    assert '"""' not in template and "\u0007" not in template and "ü" not in template
    [rendered] = render_like_ollama(template, [[{"role": "user", "content": "q"}]], None)
    assert rendered.endswith('Assistant """\u0007 ünïcode\n')
