"""Byte-level BPE tokenizers trained locally with HF ``tokenizers``, and a model folder's tokenizer loaded.

Digits are split one per token by default: BPE otherwise merges "46" into one
symbol and a small model cannot learn arithmetic over opaque number tokens.

A loaded tokenizer carries the chat template every part of a run uses (``load_tokenizer`` is the one
loader: planning, curation, training, evaluation, serving). A base model's folder often carries none
(Gemma 3 270M's GGUF holds no template): when its vocabulary holds a family's own turn tokens as single
tokens (``TURN_FORMATS``: Gemma's ``<start_of_turn>`` / ``<end_of_turn>``), the loader puts that family's
template on it (the one TRL ships, Google's Gemma 3 template for Gemma) and makes its end-of-turn token the
EOS, the token the trainer teaches at the end of every answer and generation stops at. No token is added
(an untrained base would read a new token's random embedding row). A vocabulary without a family's turn
tokens keeps the plain format (``bos + prompt``, ``answer + eos``). The trainer saves this tokenizer with
every checkpoint, so the registered model, its server and its export carry the same template.
``trainers/training/chat_templates.py`` states the choice and applies a template a task names instead.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from trainteam.core.errors import BadInput
from trainteam.trainers.training.config import TokenizerConfig

_ROLES = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


@dataclass(frozen=True)
class TurnFormat:
    """A model family's own chat turns: the template TRL ships for it and the tokens that open and close a turn."""

    family: str
    template: str  # a name in TRL's chat_templates folder, without .jinja
    start: str
    end: str  # closes every turn: the EOS the trainer teaches and generation stops at

    def describe(self) -> str:
        return f"{self.family}'s own turn format (TRL's {self.template} template: {self.start}user ... {self.end})"


TURN_FORMATS = (TurnFormat("Gemma", "gemma3", "<start_of_turn>", "<end_of_turn>"),)


def trl_template_path(name: str) -> Path:
    """Where TRL keeps the chat template ``name`` (found without importing TRL); BadInput without TRL."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise BadInput("model.chat_template: TRL is not installed (its chat_templates folder holds the templates)")
    return Path(list(spec.submodule_search_locations)[0]) / "chat_templates" / f"{name}.jinja"


def family_format(tokenizer) -> TurnFormat | None:
    """The family whose turn tokens are single tokens of the tokenizer's vocabulary, if one is."""
    vocab = tokenizer.get_vocab()
    return next((f for f in TURN_FORMATS if f.start in vocab and f.end in vocab), None)


def use_turn_format(tokenizer, fmt: TurnFormat) -> None:
    """Put ``fmt``'s template on ``tokenizer`` (in place), its end-of-turn token the EOS."""
    tokenizer.chat_template = trl_template_path(fmt.template).read_text(encoding="utf-8")
    tokenizer.eos_token = fmt.end


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
    A tokenizer without a chat template whose vocabulary holds a family's turn tokens gets that family's
    template (the module docstring).
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
    fmt = None if getattr(tok, "chat_template", None) else family_format(tok)
    if fmt is not None:
        use_turn_format(tok, fmt)
    return tok
