"""A safetensors Hugging Face folder -> one GGUF file, written with llama.cpp's own Python package (``gguf``).

The steps follow llama.cpp's converter (``convert_hf_to_gguf.py``), which is a script in llama.cpp's repository
and not part of the ``gguf`` package, for the architectures trainteam trains: ``llama`` (SmolLM2, Llama) and
``qwen2``. What it does, and so what this module does:

- the hyper-parameters as ``<arch>.*`` keys (blocks, context, widths, heads, rope, norm epsilon);
- the byte-level BPE vocabulary as ``tokenizer.ggml.*``: every id's token and type (normal, control for special
  added tokens, user-defined for the other added ones), the merges, the special ids and the chat template
  (``gguf.SpecialVocab``), and the pre-tokenizer's name, found as the converter finds it: the sha256 of the
  token ids of its check text, looked up in its table (``PRE_TOKENIZERS``, the entries for the families here);
- the end-of-turn id(s) the chat template closes an assistant turn with (``tokenizer.ggml.eot_token_id``), so
  a runtime stops where the model was trained to stop;
- the tensors under llama.cpp's names (``gguf.get_tensor_name_map``), the llama query and key weights permuted
  to llama.cpp's rope layout, a tied output matrix left out (llama.cpp reads the embedding), 1-d tensors in
  f32 and the rest in the asked type (``f16``, or ``q8_0`` by ``gguf.quants.quantize`` where a row divides
  into its 32-value blocks, else f16).

It is hand-written because no package on the registry exports a folder to GGUF as a library call: the
converter is a script outside ``gguf``. Torch and transformers load at this seam only.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import Any, Literal

from trainteam.core.errors import BadInput

Quant = Literal["f16", "q8_0"]
QUANTS: tuple[Quant, ...] = ("f16", "q8_0")
# transformers' architecture name -> llama.cpp's architecture name (gguf.MODEL_ARCH_NAMES)
ARCHITECTURES = {"LlamaForCausalLM": "llama", "Qwen2ForCausalLM": "qwen2"}
# The converter's check text: its token ids' sha256 names the pre-tokenizer (convert_hf_to_gguf.py, llama.cpp).
CHECK_TEXT = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) "
    "✅ 🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
    "------======= нещо на "
    "Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure I'll "
    "make it, 'D you like some tea? We'Ve a'lL"
)
PRE_TOKENIZERS = {  # the converter's hashes for the families trainteam trains
    "855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249": "smollm",
    "e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea": "qwen2",
    "0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5": "llama-bpe",
    "3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454": "gpt-2",
}
_SKIPPED = ("rotary_emb.inv_freq",)


@dataclass(frozen=True)
class GgufWritten:
    """One GGUF file written: where, what it holds, how long it took."""

    path: Path
    architecture: str
    quant: Quant
    tensors: int
    pre_tokenizer: str
    eot_ids: tuple[int, ...]
    bytes: int
    seconds: float


def gguf_architecture(config: dict[str, Any], folder: Path) -> str:
    """llama.cpp's name for the folder's architecture, or BadInput naming the supported ones and the way out."""
    names = config.get("architectures") or [config.get("model_type", "unknown")]
    arch = ARCHITECTURES.get(names[0])
    if arch is None:
        known = ", ".join(f"{k} ({v})" for k, v in ARCHITECTURES.items())
        raise BadInput(
            f"{folder}: architecture {names[0]} cannot be exported to GGUF here (supported: {known}); "
            "export it with --format hf instead"
        )
    return arch


def write_gguf(
    folder: Path, out_file: Path, quant: Quant, *, name: str, eot_ids: tuple[int, ...] = (), tokenizer: Any = None
) -> GgufWritten:
    """Write ``folder`` (config.json, *.safetensors, tokenizer) as ``out_file`` in ``quant``; see the module.
    ``tokenizer``: the folder's tokenizer as the model was trained with it (default: ``AutoTokenizer`` of it)."""
    import gguf
    from transformers import AutoTokenizer

    started = time.monotonic()
    if quant not in QUANTS:
        raise BadInput(f"--quant: {quant!r} is not one of {', '.join(QUANTS)}")
    config = json.loads((folder / "config.json").read_text())
    arch = gguf_architecture(config, folder)
    tokenizer = tokenizer or AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    writer = gguf.GGUFWriter(str(out_file), arch)
    _hyper_parameters(writer, config, name, quant)
    pre = _vocabulary(writer, folder, config, tokenizer)
    for eot in eot_ids:
        writer.add_eot_token_id(eot)
        break  # the key holds one id: the first end-of-turn token (the runtime also stops at EOS)
    count = _tensors(writer, folder, config, arch, quant)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return GgufWritten(
        path=out_file,
        architecture=arch,
        quant=quant,
        tensors=count,
        pre_tokenizer=pre,
        eot_ids=eot_ids,
        bytes=out_file.stat().st_size,
        seconds=time.monotonic() - started,
    )


def _file_type(quant: Quant) -> Any:
    import gguf

    return gguf.LlamaFileType.MOSTLY_Q8_0 if quant == "q8_0" else gguf.LlamaFileType.MOSTLY_F16


def _hyper_parameters(writer: Any, config: dict[str, Any], name: str, quant: Quant) -> None:
    import gguf

    heads = config["num_attention_heads"]
    writer.add_name(name)
    writer.add_block_count(config["num_hidden_layers"])
    writer.add_context_length(config.get("max_position_embeddings", 2048))
    writer.add_embedding_length(config["hidden_size"])
    writer.add_feed_forward_length(config["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(config.get("num_key_value_heads", heads))
    writer.add_rope_freq_base(
        float(config.get("rope_theta") or (config.get("rope_parameters") or {}).get("rope_theta", 10000.0))
    )
    writer.add_layer_norm_rms_eps(float(config.get("rms_norm_eps", 1e-6)))
    writer.add_vocab_size(config["vocab_size"])
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    writer.add_rope_dimension_count(head_dim)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_type(gguf.GGUFType.MODEL)
    writer.add_file_type(_file_type(quant))
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)


def pre_tokenizer(tokenizer: Any, folder: Path) -> str:
    """The converter's name for the tokenizer's pre-tokenizer, or BadInput (llama.cpp would split text otherwise)."""
    digest = sha256(str(tokenizer.encode(CHECK_TEXT)).encode()).hexdigest()
    if digest not in PRE_TOKENIZERS:
        raise BadInput(
            f"{folder}: its tokenizer's pre-tokenizer (check hash {digest[:12]}) is not one llama.cpp knows for "
            f"{', '.join(sorted(set(PRE_TOKENIZERS.values())))}; export it with --format hf instead"
        )
    return PRE_TOKENIZERS[digest]


def _vocabulary(writer: Any, folder: Path, config: dict[str, Any], tokenizer: Any) -> str:
    """Tokens, types, merges, special ids and the chat template, as the converter's BPE path writes them."""
    import gguf

    if not getattr(tokenizer, "is_fast", False) or not (folder / "tokenizer.json").is_file():
        raise BadInput(f"{folder}: no tokenizer.json (a byte-level BPE tokenizer); export it with --format hf instead")
    vocab_size = config["vocab_size"]
    pre = pre_tokenizer(tokenizer, folder)
    by_id = {i: t for t, i in tokenizer.get_vocab().items()}
    added = tokenizer.get_added_vocab()
    decoder = tokenizer.added_tokens_decoder
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        token = by_id.get(i)
        if token is None:
            tokens.append(f"[PAD{i}]")
            types.append(gguf.TokenType.UNUSED)
            continue
        if token in added:
            special = decoder[i].special or (token.startswith("<|") and token.endswith("|>"))
            types.append(gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED)
        else:
            types.append(gguf.TokenType.NORMAL)
        tokens.append(token)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    special = gguf.SpecialVocab(folder, load_merges=True, n_vocab=vocab_size)
    if special.chat_template is None and tokenizer.chat_template:
        special.chat_template = tokenizer.chat_template
    # said, not left to llama.cpp's default for the vocabulary type: whether the tokenizer puts BOS in front
    bare, framed = tokenizer.encode("a", add_special_tokens=False), tokenizer.encode("a")
    special.add_special_token["bos"] = bool(framed[:1] != bare[:1] and framed[:1] == [tokenizer.bos_token_id])
    special.add_to_gguf(writer, quiet=True)
    return pre


def _permuted(weights: Any, heads: int) -> Any:
    """llama.cpp's rope layout for a query or key weight (the converter's ``LlamaModel.permute``)."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def _tensors(writer: Any, folder: Path, config: dict[str, Any], arch: str, quant: Quant) -> int:
    import gguf
    import numpy as np
    from safetensors import safe_open

    blocks = config["num_hidden_layers"]
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], blocks)
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    tied = bool(config.get("tie_word_embeddings", False))
    count = 0
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as fh:
            for key in fh.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if key.endswith(_SKIPPED) or (tied and key == "lm_head.weight"):
                    continue
                new = names.get_name(key, try_suffixes=(".weight", ".bias"))
                if new is None:
                    raise BadInput(f"{file}: tensor {key} has no GGUF name for {arch}; export it with --format hf")
                data = fh.get_tensor(key).float().numpy()
                if arch == "llama" and key.endswith(("q_proj.weight", "q_proj.bias")):
                    data = _permuted(data, heads)
                elif arch == "llama" and key.endswith(("k_proj.weight", "k_proj.bias")):
                    data = _permuted(data, kv_heads)
                encoded, qtype = _encoded(data, quant, np)
                writer.add_tensor(new, encoded, raw_dtype=qtype)
                count += 1
    return count


def _encoded(data: Any, quant: Quant, np: Any) -> tuple[Any, Any]:
    """The tensor in its GGUF type: f32 for 1-d, q8_0 where rows split into 32-value blocks, else f16."""
    import gguf

    if data.ndim <= 1:
        return data.astype(np.float32), gguf.GGMLQuantizationType.F32
    if quant == "q8_0" and data.shape[-1] % 32 == 0:
        q8 = gguf.GGMLQuantizationType.Q8_0
        return gguf.quants.quantize(data.astype(np.float32), q8), q8
    return data.astype(np.float16), gguf.GGMLQuantizationType.F16
