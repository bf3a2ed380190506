"""The GGUF writer, for each architecture it supports, read back by independent readers.

Small random models of both families (a llama with grouped-query attention, a qwen2 with its q/k/v biases, tied and
untied output), on SmolLM2's real byte-level BPE tokenizer, written as f16 and q8_0 and loaded again by
transformers' own GGUF reader (which undoes llama.cpp's query/key permutation itself): the logits match the
folder's within the type's rounding, and the metadata holds what llama.cpp needs (architecture, pre-tokenizer,
merges, special and end-of-turn ids, the chat template).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

from trainteam.core.errors import BadInput
from trainteam.trainers.export.gguf_writer import write_gguf

PROMPT = [{"role": "user", "content": "Name three colours, then count to five: 1, 2, 3"}]
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def _tiny(folder: Path, real: Path, arch: str, tied: bool) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    shape = dict(vocab_size=49152, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                 tie_word_embeddings=tied, bos_token_id=1, eos_token_id=2)
    model = (LlamaForCausalLM(LlamaConfig(**shape)) if arch == "llama"
             else Qwen2ForCausalLM(Qwen2Config(**shape, use_sliding_window=False)))
    with torch.no_grad():  # random init leaves biases at zero: make qwen2's matter
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0, 0.5)
    model.save_pretrained(folder)
    for name in TOKENIZER_FILES:
        shutil.copy(real / name, folder / name)
    return folder


def _logits(model, tokenizer) -> torch.Tensor:
    ids = tokenizer.apply_chat_template(PROMPT, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        return model(**ids).logits[0]


@pytest.mark.parametrize(("arch", "tied", "quants"), [("llama", True, ("f16", "q8_0")), ("qwen2", False, ("q8_0",))])
def test_written_gguf_reads_back_with_the_same_logits(real_model, tmp_path, arch, tied, quants):
    import gguf
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = _tiny(tmp_path / arch, real_model, arch, tied)
    # SmolLM2's tokenizer as SmolLM2 loads it (in a qwen2 folder transformers would swap in Qwen's regex)
    tokenizer = AutoTokenizer.from_pretrained(real_model)
    want = _logits(AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32), tokenizer)
    spread = want.abs().max().item()
    for quant, bound in ((q, {"f16": 0.01, "q8_0": 0.05}[q]) for q in quants):
        out = tmp_path / f"{arch}-{quant}.gguf"
        written = write_gguf(folder, out, quant, name=f"tiny-{arch}", eot_ids=(2,), tokenizer=tokenizer)
        assert written.architecture == arch and written.pre_tokenizer == "smollm"
        got = _logits(AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=out.name, dtype=torch.float32),
                      tokenizer)
        assert (got - want).abs().max().item() <= bound * spread, (arch, quant)
        assert torch.equal(got.argmax(-1), want.argmax(-1)) or quant == "q8_0"
        fields = gguf.GGUFReader(out).fields
        text = lambda key, f=fields: bytes(f[key].parts[f[key].data[0]]).decode()  # noqa: E731
        number = lambda key, f=fields: int(f[key].parts[f[key].data[0]][0])  # noqa: E731
        assert text("general.architecture") == arch and text("tokenizer.ggml.pre") == "smollm"
        assert text("tokenizer.chat_template") == tokenizer.chat_template
        assert number("tokenizer.ggml.eos_token_id") == 2 and number("tokenizer.ggml.eot_token_id") == 2
        assert len(fields["tokenizer.ggml.merges"].data) > 40000
        assert ("output.weight" in {t.name for t in gguf.GGUFReader(out).tensors}) is not tied


def test_a_tokenizer_llama_cpp_would_split_otherwise_is_refused(real_model, tiny_checkpoint, tmp_path):
    """A pre-tokenizer llama.cpp does not know for the vocabulary is refused, one line, no file: trainteam's own
    small BPE tokenizer, and SmolLM2's vocabulary in a qwen2 folder (transformers splits it with Qwen's regex)."""
    qwen = _tiny(tmp_path / "qwen2", real_model, "qwen2", False)
    for folder in (tiny_checkpoint, qwen):
        with pytest.raises(BadInput, match="pre-tokenizer .* export it with --format hf"):
            write_gguf(folder, tmp_path / "x.gguf", "f16", name="x")
    assert not (tmp_path / "x.gguf").exists()
