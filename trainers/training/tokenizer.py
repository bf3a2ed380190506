"""Byte-level BPE tokenizers trained locally with HF ``tokenizers``.

Digits are split one per token by default: BPE otherwise merges "46" into one
symbol and a small model cannot learn arithmetic over opaque number tokens.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from trainteam.core.errors import BadInput
from trainteam.trainers.training.config import TokenizerConfig

_ROLES = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


def train_tokenizer(texts: Iterable[str], config: TokenizerConfig, out_dir: Path) -> Path:
    """Train a byte-level BPE on ``texts`` and save it as a transformers tokenizer folder."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    specials = list(dict.fromkeys(config.special_tokens))
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if config.vocab_size < len(specials) + len(alphabet):
        raise BadInput(
            f"tokenizer.vocab_size: {config.vocab_size} is below the byte alphabet plus special tokens "
            f"({len(specials) + len(alphabet)})"
        )
    tok = Tokenizer(models.BPE(unk_token="<unk>" if "<unk>" in specials else None))
    steps: list[pre_tokenizers.PreTokenizer] = [pre_tokenizers.ByteLevel(add_prefix_space=False)]
    if config.split_digits:
        steps.insert(0, pre_tokenizers.Digits(individual_digits=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence(steps)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=config.vocab_size,
        min_frequency=config.min_frequency,
        special_tokens=specials,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    count = 0

    def _counted() -> Iterable[str]:
        nonlocal count
        for t in texts:
            if not isinstance(t, str):
                raise BadInput(f"tokenizer texts: expected str, got {type(t).__name__}")
            count += 1
            yield t

    tok.train_from_iterator(_counted(), trainer=trainer)
    if count == 0:
        raise BadInput("tokenizer texts: no text to train on")
    roles = {role: name for role, name in _ROLES.items() if name in specials}
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **roles)
    if config.extra_tokens:
        fast.add_special_tokens({"additional_special_tokens": list(config.extra_tokens)})
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(str(out_dir))
    return out_dir


def load_tokenizer(path: Path, padding_side: str = "left"):
    """Load a saved tokenizer; ``padding_side`` is not stored by transformers, so it is set here.

    Left padding is what batched generation needs; the trainers' collators pad on their own.
    """
    from transformers import AutoTokenizer

    path = Path(path)
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer_config.json").is_file():
        raise BadInput(f"{path}: not a tokenizer folder (no tokenizer.json)")
    tok = AutoTokenizer.from_pretrained(
        str(path), padding_side=padding_side, trust_remote_code=False, local_files_only=True
    )
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok
