"""GGUF checkpoint -> safetensors Hugging Face folder (model, tokenizer, chat template), checked by logits;
and the check of a Hugging Face model folder that is imported as it is (``models import FOLDER --register``).

transformers' own GGUF loader dequantizes the file into a float model and builds the tokenizer
(with the chat template the file carries) from its metadata. The leftover GGUF quantizer is removed
so that ``save_pretrained`` writes plain safetensors; the saved folder is then reloaded and its
logits on a fixed prompt compared with the in-memory model's. Everything is written into a temporary
folder beside the destination and renamed at the end: a crash or a failed check leaves no half folder.
Nothing is fetched from a hub, and no remote code is run.

A folder imported as it is must hold what ``save_pretrained`` writes: config.json, ``*.safetensors``
weights and a tokenizer. What it is (``folder_facts``: architecture, model type, parameter count) is
read from config.json and the safetensors headers, without loading a tensor or torch.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainteam.core.errors import BadInput, TrainteamError

GGUF_MAGIC = b"GGUF"
LOGITS_TOLERANCE = 1e-4
CHECK_PROMPT = "The capital of France is Paris. Two plus three equals"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
FOLDER_SHAPE = "a model folder holds config.json, *.safetensors weights and a tokenizer, as save_pretrained writes them"
_HEADER_MAX = 100 << 20  # a safetensors header larger than this is not one

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ImportResult:
    """What an import produced: the folder and the evidence that it holds the same model."""

    folder: Path
    architecture: str
    parameters: int
    dtype: str
    max_abs_logit_diff: float
    chat_template: bool
    seconds: float


@dataclass(frozen=True)
class ModelFacts:
    """What a model folder's files say it is, read without loading it."""

    architecture: str  # config.json's architectures[0], else its model_type
    model_type: str | None
    parameters: int | None  # from the safetensors headers; None when one cannot be read


class ImportCheckFailed(TrainteamError):
    """The reloaded folder's logits differ from the loaded model's: nothing was kept."""


def check_source(path: Path) -> Path:
    """The GGUF file, or BadInput: missing, not a file, or without the ``GGUF`` magic bytes."""
    path = Path(path).expanduser()
    if not path.exists():
        raise BadInput(f"{path}: no such file")
    if not path.is_file():
        raise BadInput(f"{path}: not a file")
    with path.open("rb") as fh:
        magic = fh.read(len(GGUF_MAGIC))
    if magic != GGUF_MAGIC:
        raise BadInput(f"{path}: not a GGUF file (its first bytes are {magic!r}, a GGUF file starts with b'GGUF')")
    return path.resolve()


def check_model_folder(path: Path) -> Path:
    """A Hugging Face model folder to register where it is, or BadInput naming what it lacks and the fix."""
    path = Path(path).expanduser()
    if not path.exists():
        raise BadInput(f"{path}: no such file or folder")
    if not path.is_dir():
        raise BadInput(f"{path}: not a folder")
    problem = _folder_problem(path)
    if problem:
        raise BadInput(f"{path}: {problem}; {FOLDER_SHAPE} (or import a .gguf file)")
    return path.resolve()


def _folder_problem(path: Path) -> str | None:
    if not (path / "config.json").is_file():
        return "no config.json"
    if not any(path.glob("*.safetensors")):
        found = sorted(p.name for p in path.glob("*.bin"))
        return "no *.safetensors weights" + (f" (found {', '.join(found[:3])})" if found else "")
    if not any((path / name).is_file() for name in TOKENIZER_FILES):
        return f"no tokenizer ({', '.join(TOKENIZER_FILES)})"
    return None


def folder_facts(folder: Path) -> ModelFacts:
    """The architecture (config.json), model type and parameter count of a checked model folder."""
    config_path = Path(folder) / "config.json"
    try:
        config = json.loads(config_path.read_text())
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise BadInput(f"{config_path}: not readable JSON ({type(exc).__name__}); {FOLDER_SHAPE}") from None
    if not isinstance(config, dict):
        raise BadInput(f"{config_path}: not a JSON object; {FOLDER_SHAPE}")
    archs, model_type = config.get("architectures"), config.get("model_type")
    model_type = model_type if isinstance(model_type, str) and model_type else None
    arch = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else model_type
    if not arch:
        raise BadInput(f"{config_path}: names no architecture (no 'architectures', no 'model_type'); {FOLDER_SHAPE}")
    return ModelFacts(architecture=arch, model_type=model_type, parameters=safetensors_parameters(Path(folder)))


def safetensors_parameters(folder: Path) -> int | None:
    """The parameters in a folder's ``*.safetensors`` files, summed from their headers (no tensor is read)."""
    total = 0
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with path.open("rb") as fh:
                (size,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(size)) if size <= _HEADER_MAX else None
            tensors = [t for k, t in header.items() if k != "__metadata__"] if isinstance(header, dict) else None
            if tensors is None:
                return None
            total += sum(math.prod(int(d) for d in t["shape"]) for t in tensors)
        except (OSError, ValueError, struct.error, KeyError, TypeError):
            return None
    return total


def check_destination(out: Path) -> Path:
    """The output folder, or BadInput when it exists and is not an empty folder."""
    out = Path(out).expanduser()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise BadInput(f"--out {out}: already exists and is not an empty folder")
    return out.absolute()


def import_gguf(source: Path, out: Path, progress: Progress = lambda _line: None) -> ImportResult:
    """Convert ``source`` (a .gguf file) into the folder ``out``; see the module docstring."""
    source, out = check_source(source), check_destination(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.importing-", dir=out.parent))
    try:
        result = _convert(source, staging, progress)
        _usual_permissions(staging)
        if out.exists():
            out.rmdir()  # empty (checked above)
        os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ImportResult(folder=out, seconds=round(time.monotonic() - started, 1), **result)


def _usual_permissions(folder: Path) -> None:
    """mkdtemp (and the safetensors writer) make owner-only files; the folder gets the umask's usual modes."""
    umask = os.umask(0)
    os.umask(umask)
    folder.chmod(0o777 & ~umask)
    for path in folder.rglob("*"):
        path.chmod((0o777 if path.is_dir() else 0o666) & ~umask)


def _convert(source: Path, staging: Path, progress: Progress) -> dict:
    model, tokenizer = _load(source, progress)
    progress(f"saving safetensors to {staging.name} ...")
    model.hf_quantizer.remove_quantization_config(model)
    model.save_pretrained(staging, safe_serialization=True)
    tokenizer.save_pretrained(staging)
    progress("reloading the saved folder to compare logits ...")
    diff = _logits_diff(model, tokenizer, staging)
    if not diff <= LOGITS_TOLERANCE:
        raise ImportCheckFailed(
            f"{source.name}: reloaded logits differ by {diff:.3g} (> {LOGITS_TOLERANCE:g}); nothing was written"
        )
    return {
        "architecture": type(model).__name__,
        "parameters": sum(p.numel() for p in model.parameters()),
        "dtype": str(next(model.parameters()).dtype).removeprefix("torch."),
        "max_abs_logit_diff": diff,
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
    }


def _load(source: Path, progress: Progress):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = str(source.parent), source.name
    progress(f"loading {name} with transformers' GGUF loader (dequantizing; about a minute on 2 CPU cores) ...")
    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, trust_remote_code=False)
    except (ValueError, NotImplementedError, KeyError) as exc:
        reason = (str(exc).splitlines() or [type(exc).__name__])[0].replace(str(source), source.name)
        raise BadInput(f"{source}: transformers cannot load this GGUF file: {reason}") from exc
    model.eval()
    return model, tokenizer


def _logits_diff(model, tokenizer, folder: Path) -> float:
    import torch
    from transformers import AutoModelForCausalLM

    reloaded = AutoModelForCausalLM.from_pretrained(folder, use_safetensors=True, trust_remote_code=False).eval()
    ids = tokenizer(CHECK_PROMPT, return_tensors="pt").input_ids
    with torch.no_grad():
        before = model(ids).logits.float()
        after = reloaded(ids).logits.float()
    return float((before - after).abs().max())
