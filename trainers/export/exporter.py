"""A registered model leaves as a Hugging Face folder, a GGUF file or an Ollama folder, read back before it is done.

``check_export_request`` refuses what cannot work before anything is written (an ``--out`` that exists or cannot
be written, a registered folder that changed since it was registered or is an adapter, an architecture or a
tokenizer GGUF cannot hold, a chat template a Modelfile cannot say). ``export_model`` then writes everything into
a temporary folder beside ``--out``, reads it back (``export_check``: answers, tokenizer, stops; for Ollama the
template too) and renames the folder to ``--out`` only when the check holds: a failure or a crash leaves nothing
half-written under ``--out``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from trainteam.core.errors import BadInput, TrainteamError
from trainteam.core.hashing import sha256_file, weights_hash
from trainteam.trainers.export.export_check import CheckRows, ExportCheck, check_export
from trainteam.trainers.export.gguf_writer import QUANTS, Quant, gguf_architecture, pre_tokenizer, write_gguf
from trainteam.trainers.export.model_card import CardFacts, model_card
from trainteam.trainers.export.modelfile import ollama_modelfile
from trainteam.trainers.serving.registry import IDENTITY_FILES

Format = Literal["gguf", "hf", "ollama"]
FORMATS: tuple[Format, ...] = ("gguf", "hf", "ollama")
Progress = Callable[[str], None]
# The files of a model folder an export carries: what defines the checkpoint (the registry's identity files, an
# adapter's config aside: an adapter is refused) and the tokenizer's other files; trainer state stays behind.
MODEL_FILES = (
    "*.safetensors",
    "model.safetensors.index.json",
    *(name for name in IDENTITY_FILES if name != "adapter_config.json"),
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "tokenizer.model",
)


class ExportFailed(TrainteamError):
    """The export was written but reading it back did not hold: nothing was kept."""


class ExportRequest(BaseModel):
    """What a person asked for: the format, the GGUF type, the folder to create."""

    format: Format
    quant: Quant = Field(default="f16", description="gguf and ollama: f16 or q8_0")
    out: Path


class ExportSource(BaseModel):
    """The registered model to export and what its run recorded."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    model_id: str
    name: str
    folder: Path
    content_hash: str
    facts: CardFacts
    rows: CheckRows


class ExportResult(BaseModel):
    """One export, done and checked."""

    model_id: str
    format: Format
    quant: Quant | None
    out: Path
    artifact: str = Field(description="the main file (a .gguf) or the weights (hf), relative to out")
    sha256: str
    files: dict[str, int] = Field(description="file name -> bytes")
    write_seconds: float
    check: ExportCheck
    seconds: float


def safe_name(name: str) -> str:
    """A file-name stem from a model's name."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.") or "model"


def check_export_request(source: ExportSource, request: ExportRequest, *, hashed: str) -> Path:
    """The absolute ``--out``, or BadInput naming what cannot work and the fix; ``hashed``: the folder's hash now."""
    out = request.out.expanduser().absolute()
    if out.exists() or out.is_symlink():
        raise BadInput(f"--out {out}: already exists; name a new folder (the export creates it)")
    parent = next((p for p in out.parents if p.exists()), Path("/"))
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise BadInput(f"--out {out}: {parent} is not a writable folder; name a folder you can write")
    if request.quant not in QUANTS:
        raise BadInput(f"--quant: {request.quant!r} is not one of {', '.join(QUANTS)}")
    folder = source.folder
    if (folder / "adapter_config.json").is_file():
        raise BadInput(
            f"model {source.model_id}: {folder} holds a LoRA adapter, not merged weights; register the merged model"
        )
    if hashed != source.content_hash:
        raise BadInput(
            f"model {source.model_id}: its folder {folder} changed since it was registered (content hash "
            f"{hashed[:12]}, registered {source.content_hash[:12]}); restore the folder or register it again"
        )
    if request.format in ("gguf", "ollama"):
        _gguf_can_hold(folder, request.format)
    return out


def _gguf_can_hold(folder: Path, fmt: Format) -> None:
    """BadInput unless the folder's architecture, tokenizer (and, for Ollama, chat template) fit a GGUF export."""
    from transformers import AutoTokenizer

    gguf_architecture(json.loads((folder / "config.json").read_text()), folder)
    if not (folder / "tokenizer.json").is_file():
        raise BadInput(f"{folder}: no tokenizer.json (a byte-level BPE tokenizer); export it with --format hf instead")
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=False)
    pre_tokenizer(tokenizer, folder)
    if fmt == "ollama":
        ollama_modelfile(tokenizer, "model.gguf")  # a chat template the Modelfile cannot say is refused here


def export_model(source: ExportSource, request: ExportRequest, progress: Progress, *, hashed: str) -> ExportResult:
    """Export ``source`` as ``request`` asks (see the module); ExportFailed when the read-back does not hold."""
    out = check_export_request(source, request, hashed=hashed)
    started = time.monotonic()
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.exporting-", dir=out.parent))
    try:
        artifact, write_s, check = _write_and_check(source, request, staging, progress)
        failures = check.failures()
        if failures:
            raise ExportFailed(
                f"export of {source.model_id} did not read back as the registered model: {'; '.join(failures)}; "
                "nothing was kept"
            )
        if request.format == "hf":
            (staging / "README.md").write_text(model_card(source.facts, folder=str(out), check_line=check.line()))
        for p in staging.iterdir():
            p.chmod(0o644)
        staging.chmod(0o755)
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    files = {p.name: p.stat().st_size for p in sorted(out.iterdir())}
    digest = weights_hash(out) if request.format == "hf" else sha256_file(out / artifact)
    return ExportResult(
        model_id=source.model_id,
        format=request.format,
        quant=None if request.format == "hf" else request.quant,
        out=out,
        artifact=artifact,
        sha256=digest,
        files=files,
        write_seconds=round(write_s, 1),
        check=check,
        seconds=round(time.monotonic() - started, 1),
    )


def _write_and_check(
    source: ExportSource, request: ExportRequest, staging: Path, progress: Progress
) -> tuple[str, float, ExportCheck]:
    """Write the format into ``staging`` and read it back: (the main file's name, seconds writing, the check)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(source.folder, trust_remote_code=False)
    eot = end_of_turn_ids(tokenizer)
    started = time.monotonic()
    if request.format == "hf":
        progress(f"writing the Hugging Face folder of {source.model_id}")
        artifact = _hf_folder(source.folder, staging, tokenizer, eot)
        written = time.monotonic() - started
        return artifact, written, check_export(source.folder, staging, source.rows, progress)
    name = f"{safe_name(source.name)}-{request.quant}.gguf"
    progress(f"writing {name} ({request.quant}) with llama.cpp's gguf package")
    write_gguf(source.folder, staging / name, request.quant, name=source.name, eot_ids=eot, tokenizer=tokenizer)
    template_line = _ollama(staging, name, tokenizer, source.folder) if request.format == "ollama" else None
    written = time.monotonic() - started
    check = check_export(source.folder, staging / name, source.rows, progress)
    return name, written, check.model_copy(update={"template": template_line})


def end_of_turn_ids(tokenizer: Any) -> tuple[int, ...]:
    """The special token(s) the chat template closes an assistant turn with, then EOS; just EOS without a template."""
    eos = tokenizer.eos_token_id
    ids: list[int] = []
    if tokenizer.chat_template:
        marker = "\u2063answer\u2063"
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": "q"}, {"role": "assistant", "content": marker}], tokenize=False
        )
        after = text.split(marker, 1)[1] if marker in text else ""
        special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
        ids = [i for i in tokenizer.encode(after, add_special_tokens=False)[:2] if i in special][:1]
    return tuple(dict.fromkeys([*ids, *([eos] if eos is not None else [])]))


def _hf_folder(folder: Path, staging: Path, tokenizer: Any, eot: tuple[int, ...]) -> str:
    """The model's files copied, with a generation config whose EOS holds the end-of-turn token(s)."""
    from transformers import GenerationConfig

    for pattern in MODEL_FILES:
        for p in folder.glob(pattern):
            if p.is_file():
                shutil.copy2(p, staging / p.name)
    try:
        generation = GenerationConfig.from_pretrained(folder)
    except OSError:  # no generation_config.json: from the model's config
        generation = GenerationConfig.from_model_config(_config(folder))
    generation.eos_token_id = list(eot) if len(eot) > 1 else (eot[0] if eot else generation.eos_token_id)
    if generation.pad_token_id is None and tokenizer.pad_token_id is not None:
        generation.pad_token_id = tokenizer.pad_token_id
    generation.save_pretrained(staging)
    weights = sorted(p.name for p in staging.glob("*.safetensors"))
    return weights[0] if len(weights) == 1 else "model.safetensors.index.json"


def _adds_bos(folder: Path) -> bool:
    """Whether the tokenizer adds BOS itself (``add_bos_token`` in tokenizer_config.json, as the GGUF records it)."""
    config = folder / "tokenizer_config.json"
    return bool(config.is_file() and json.loads(config.read_text()).get("add_bos_token"))


def _config(folder: Path) -> Any:
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(folder, trust_remote_code=False)


def _ollama(staging: Path, gguf_name: str, tokenizer: Any, folder: Path) -> str:
    """The Modelfile beside the GGUF, its template checked against the chat template: the check's line. The
    template writes the BOS text only where the GGUF's tokenizer does not add it (Ollama would send it twice)."""
    written = ollama_modelfile(tokenizer, gguf_name, write_bos=not _adds_bos(folder))
    (staging / "Modelfile").write_text(written.text)
    return written.check_line
