"""Where a model a request names is found, read offline: a folder here, a model registered in the
workspace, a model in the local Hugging Face cache. Nothing is downloaded.

``resolve_model`` turns a ``ModelName`` (``model_names``) into a ``ModelChoice`` (the local folder
and where it came from) or a one-line ``BadInput`` naming the model and the way out. The registry
is read read-only (the workspace's SQLite file through the stdlib, or the configured database URL):
planning a request writes nothing. The Hugging Face cache is the one ``huggingface_hub`` uses
(HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub, read at call time), scanned
with its own ``scan_cache_dir``.

Matching a name to the cache or the registry compares tokens (``name_tokens``): every token the
request writes must be in the model's name; a candidate whose extra tokens hold a variant word
(instruct, chat, it) the request did not write is a different model (a base model is not its
instruct tune); of the rest, the one with the fewest extra tokens wins ("gpt2" is gpt2, not
gpt2-medium), and a tie is refused naming the candidates.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from huggingface_hub import scan_cache_dir
from huggingface_hub.errors import CacheNotFound
from pydantic import BaseModel, Field
from sqlalchemy.exc import SQLAlchemyError

from trainteam.core.db import make_engine
from trainteam.core.dbread import connect_readonly, env_setting, fetch, workspace_root
from trainteam.core.errors import BadInput
from trainteam.trainers.serving.registry import ModelRegistry
from trainteam.workflows.requests.model_names import WAYS_OUT, ModelChoice, ModelName, closed_refusal, name_tokens

VARIANTS = {"instruct", "chat", "it", "sft", "dpo", "rlhf", "base", "coder", "code", "math"}


class RegisteredModel(BaseModel):
    id: str
    name: str
    path: Path


class CachedModel(BaseModel):
    repo_id: str
    snapshot: Path = Field(description="the revision main points to, else the newest one")
    revision: str


class ModelSources(BaseModel):
    """What a request's model name may resolve to, read once per request."""

    base_dir: Path
    workspace: Path
    registered: list[RegisteredModel] = Field(default_factory=list)
    hf_cache: Path

    @classmethod
    def find(cls, base_dir: Path | None = None, workspace: Path | str | None = None) -> ModelSources:
        """Sources as this process sees them: ``base_dir`` (default the cwd) for folders, the
        workspace (default TRAINTEAM_HOME or ./.trainteam) for registered models, the HF cache."""
        root = workspace_root(workspace)
        return cls(
            base_dir=Path(base_dir) if base_dir else Path.cwd(),
            workspace=root,
            registered=registered_models(root),
            hf_cache=hf_cache_dir(),
        )


def hf_cache_dir() -> Path:
    """The hub cache as ``huggingface_hub.constants`` computes it, from the environment now (the
    constants are read once, when the library is imported)."""
    env = os.environ
    cache = env.get("HF_HUB_CACHE") or env.get("HUGGINGFACE_HUB_CACHE")
    if not cache:
        home = env.get("HF_HOME") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "huggingface"
        )
        cache = os.path.join(home, "hub")
    return Path(os.path.expandvars(os.path.expanduser(cache)))


def registered_models(root: Path) -> list[RegisteredModel]:
    """The workspace's registered models, read only: none when the workspace does not exist yet."""
    url = env_setting("database_url")
    if url:
        try:
            return [
                RegisteredModel(id=m.id, name=m.name, path=Path(m.path)) for m in ModelRegistry(make_engine(url)).list()
            ]
        except SQLAlchemyError:
            return []  # no registry table there yet
    conn = connect_readonly(root, ("registry_models",))
    if conn is None:
        return []
    try:
        rows = fetch(
            conn, "SELECT id, name, path FROM registry_models ORDER BY created_at", columns=("id", "name", "path")
        )
    finally:
        conn.close()
    return [RegisteredModel(**r) for r in rows]


def cached_models(cache: Path) -> list[CachedModel]:
    """Every model repository in the local Hugging Face cache with a snapshot (scan_cache_dir)."""
    try:
        info = scan_cache_dir(cache)
    except CacheNotFound:
        return []
    out = []
    for repo in info.repos:
        if repo.repo_type != "model" or not repo.revisions:
            continue
        rev = max(repo.revisions, key=lambda r: ("main" in r.refs, r.last_modified))
        out.append(CachedModel(repo_id=repo.repo_id, snapshot=rev.snapshot_path, revision=rev.commit_hash))
    return sorted(out, key=lambda m: m.repo_id.lower())


def _extra(wanted: list[str], tokens: list[str]) -> list[str] | None:
    """The tokens a candidate has beyond the request's, or None when it lacks one of them or has a
    variant word the request did not write."""
    if not set(wanted) <= set(tokens):
        return None
    extra = [t for t in tokens if t not in wanted]
    return None if VARIANTS & set(extra) else extra


def best(wanted: list[str], candidates: dict[str, list[str]]) -> list[str]:
    """The candidates (key -> tokens) that match ``wanted`` with the fewest extra tokens."""
    scored = {k: len(e) for k, toks in candidates.items() if (e := _extra(wanted, toks)) is not None}
    least = min(scored.values(), default=None)
    return [k for k, n in scored.items() if n == least]


def _weights_problem(folder: Path) -> str | None:
    if not (folder / "config.json").is_file():
        return "no config.json"
    if not any(folder.glob("*.safetensors")) and not (folder / "model.safetensors.index.json").is_file():
        return "no safetensors weights"
    return None


def _from_cache(name: ModelName, sources: ModelSources) -> ModelChoice | None:
    cached = cached_models(sources.hf_cache)
    if name.kind == "path":
        hits = [m.repo_id for m in cached if m.repo_id.lower() == name.words.lower()]
    else:
        hits = best(name.tokens, {m.repo_id: name_tokens(m.repo_id.split("/", 1)[-1]) for m in cached})
    if len(hits) > 1:
        raise BadInput(
            f"model: '{name.words}' matches {len(hits)} models in the local Hugging Face cache "
            f"({', '.join(hits[:4])}); name one of them"
        )
    if not hits:
        return None
    model = next(m for m in cached if m.repo_id == hits[0])
    problem = _weights_problem(model.snapshot)
    if problem:
        raise BadInput(
            f"model: '{name.words}' is {model.repo_id} in the local Hugging Face cache, but its snapshot "
            f"{model.snapshot} has {problem}; nothing is downloaded: {WAYS_OUT}"
        )
    return ModelChoice(
        words=name.words,
        path=model.snapshot,
        source="hf_cache",
        detail=f"{model.repo_id} from the local Hugging Face cache (revision {model.revision[:12]}, {model.snapshot})",
    )


def _registered_choice(name: ModelName, model: RegisteredModel) -> ModelChoice:
    return ModelChoice(
        words=name.words,
        path=model.path,
        source="registered",
        detail=f"registered model {model.id} '{model.name}' ({model.path})",
    )


def _from_registry(name: ModelName, sources: ModelSources) -> ModelChoice | None:
    """A name or a hub id that is a registered model's name (tokens, as for the cache)."""
    if name.kind == "path":
        hits = [m.id for m in sources.registered if m.name.lower() == name.words.lower()]
    else:
        hits = best(name.tokens, {m.id: name_tokens(m.name) for m in sources.registered})
    if len(hits) > 1:
        shown = ", ".join(f"{m.id} '{m.name}'" for m in sources.registered if m.id in hits[:4])
        raise BadInput(f"model: '{name.words}' matches {len(hits)} registered models ({shown}); name one by its id")
    return _registered_choice(name, next(m for m in sources.registered if m.id == hits[0])) if hits else None


def _registered(name: ModelName, sources: ModelSources) -> ModelChoice:
    """ "the smol model I imported", "registered model smollm2", "model m-1a2b3c": a registered model
    whose name holds the word (or whose id starts with it); without a word, the only one."""
    ref = (name.ref or "").lower()
    hits = [m for m in sources.registered if not ref or ref in m.name.lower() or m.id.startswith(ref)]
    if len(hits) == 1:
        return _registered_choice(name, hits[0])
    names = ", ".join(f"'{m.name}'" for m in (hits or sources.registered)[:5]) or "none"
    if len(hits) > 1:
        raise BadInput(
            f"model: '{name.words}' matches {len(hits)} registered models ({names}); name one (`trainteam models list`)"
        )
    raise BadInput(
        f"model: '{name.words}': no model registered in the workspace {sources.workspace} is named like "
        f"'{name.ref or ''}' (registered: {names}); import and register it first (`trainteam models import "
        "FILE.gguf|FOLDER --register --name N`), or name its folder ('fine-tune the model in DIR')"
    )


def resolve_model(name: ModelName, sources: ModelSources) -> ModelChoice:
    """The local folder ``name`` means, or BadInput naming it and the way out."""
    if name.kind == "closed":
        raise BadInput(closed_refusal(name))
    if name.kind == "registered":
        return _registered(name, sources)
    if name.kind == "path":
        folder = (sources.base_dir / Path(name.words).expanduser()).resolve()
        if folder.exists():
            return ModelChoice(words=name.words, path=folder, source="folder", detail=f"the folder {folder}")
    found = _from_registry(name, sources) or _from_cache(name, sources)
    if found is not None:
        return found
    where = "a folder here, " if name.kind == "path" else ""
    raise BadInput(
        f"model: '{name.words}' is not {where}a model registered in this workspace or in the local "
        f"Hugging Face cache ({sources.hf_cache}); nothing is downloaded: {WAYS_OUT}"
    )


def resolver(sources: ModelSources) -> Callable[[ModelName], ModelChoice]:
    """``resolve_model`` over ``sources``, each name resolved once (the reader runs more than once)."""
    done: dict[tuple[str, str], ModelChoice | BadInput] = {}

    def resolve(name: ModelName) -> ModelChoice:
        key = (name.kind, name.words)
        if key not in done:
            try:
                done[key] = resolve_model(name, sources)
            except BadInput as exc:
                done[key] = exc
        found = done[key]
        if isinstance(found, BadInput):
            raise BadInput(str(found))
        return found

    return resolve
