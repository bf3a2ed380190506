"""The model registry: checkpoints the team trained, and which one serves each role.

A registered model is identified by the content hash of its weights, config and
tokenizer files, so registering the same checkpoint twice (a re-run step after a
crash, a person repeating a command) returns the existing record instead of a
duplicate. The registering step records the Model node in the knowledge graph. A role ("eval_judge", "chat",
"persona:training_engineer", ...) points to at most one model through
a unique tag ``role:<name>``; binding moves the tag, so there is never any doubt
which model a persona gets.

Imports no torch: the CLI lists and binds models without loading them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field
from sqlalchemy import Column, ForeignKey, String, Table, Text, delete, select
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

from trainteam.core.db import JSONText, metadata, utcnow
from trainteam.core.errors import BadInput, NotFound
from trainteam.core.hashing import named_files_hash
from trainteam.core.ids import prefix_allowed
from trainteam.curation.formats import PromptFormat, folder_prompt_format

models_table = Table(
    "registry_models",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("content_hash", String(64), nullable=False, unique=True),
    Column("name", String(128), nullable=False),
    Column("path", Text, nullable=False),
    Column("base", String(255)),
    Column("stage", String(64), nullable=False),
    Column("metrics", JSONText, nullable=False),
    Column("lineage", JSONText, nullable=False),
    Column("created_at", String(40), nullable=False),
)

tags_table = Table(
    "registry_tags",
    metadata,
    Column("tag", String(128), primary_key=True),  # unique: one model per tag
    Column("model_id", String(64), ForeignKey("registry_models.id"), nullable=False, index=True),
    Column("bound_by", String(128)),
    Column("bound_at", String(40), nullable=False),
)

# How a bound role's model is prompted (``agents/compact.py``: "full" or "compact"); a role without a row: "full".
role_prompts_table = Table(
    "registry_role_prompts",
    metadata,
    Column("role", String(128), primary_key=True),
    Column("prompt", String(32), nullable=False),
)

# Files that define what a checkpoint computes. Trainer state (optimizer, rng,
# trainer_state.json) is left out: it changes nothing about the model.
IDENTITY_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "adapter_config.json",
)
# A role is a name (``eval_judge``, ``chat``) or ``persona:<name>``, the role a persona's runtime
# picks its model by (agents/bound_models.py).
_ROLE_RE = re.compile(r"^(?:persona:)?[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


class ModelRecord(BaseModel):
    id: str
    content_hash: str
    name: str
    path: str
    base: str | None = None
    stage: str
    metrics: dict[str, Any] = Field(default_factory=dict)
    lineage: dict[str, Any] = Field(default_factory=dict)
    created_at: str
    roles: list[str] = Field(default_factory=list)

    @property
    def prompt_format(self) -> PromptFormat:
        """How the model reads a prompt (``curation.formats``), recorded in ``lineage`` when it was
        registered: the chat template it was trained, evaluated and is served with, or plain."""
        return self.lineage.get("prompt_format", "plain")


def checkpoint_hash(path: Path) -> str:
    """sha256 over the names and bytes of the weight, config and tokenizer files."""
    path = Path(path)
    if not path.is_dir():
        raise BadInput(f"checkpoint {path}: not a folder")
    weights = sorted(p for p in path.glob("*.safetensors"))
    if not weights:
        found = sorted(p.name for p in path.glob("*.bin")) or ["nothing"]
        raise BadInput(
            f"checkpoint {path}: no *.safetensors weights (found {', '.join(found)}); checkpoints must be safetensors"
        )
    files = weights + sorted(path / n for n in IDENTITY_FILES if (path / n).is_file())
    return named_files_hash(sorted(files, key=lambda p: p.name))


def _role_tag(role: str) -> str:
    if not _ROLE_RE.match(role or ""):
        raise BadInput(
            f"role: {role!r} is not a valid role name (letters, digits, _ . -; at most 64; persona:NAME for a persona)"
        )
    return f"role:{role}"


class ModelRegistry:
    """Registered checkpoints in the workspace database."""

    def __init__(self, engine: Engine):
        self.engine = engine

    @classmethod
    def of(cls, ws) -> ModelRegistry:
        return cls(ws.engine)

    # -- writing -------------------------------------------------------------
    def register_checkpoint(
        self,
        path: str | Path,
        *,
        stage: str,
        base: str | None = None,
        metrics: dict[str, Any] | None = None,
        name: str | None = None,
        run_id: str | None = None,
        lineage: dict[str, Any] | None = None,
    ) -> ModelRecord:
        """Record a checkpoint folder; the same content registered again returns the first record.

        ``base`` is a registered model id or a local path the checkpoint started from.
        """
        path = Path(path).resolve()
        digest = checkpoint_hash(path)
        existing = self._by_hash(digest)
        if existing is not None:
            return existing
        model_id = f"m-{digest[:12]}"
        lin = dict(lineage or {})
        lin.setdefault("prompt_format", folder_prompt_format(path))
        if run_id:
            lin.setdefault("run_id", run_id)
        record = dict(
            id=model_id,
            content_hash=digest,
            name=name or path.name,
            path=str(path),
            base=base,
            stage=stage,
            metrics=dict(metrics or {}),
            lineage=lin,
            created_at=utcnow(),
        )
        try:
            with self.engine.begin() as conn:
                conn.execute(models_table.insert().values(**record))
        except IntegrityError:  # another process registered it in between
            found = self._by_hash(digest)
            if found is not None:
                return found
            raise
        return self.get(model_id)

    def bind(self, role: str, model: str, *, by: str | None = None, prompt: str = "full") -> ModelRecord:
        """Point ``role`` at ``model`` (id, unique id prefix or name); moves the role if bound. ``prompt``:
        how the role's model is asked (``full``, or ``compact`` for a small model trained on compact rows)."""
        tag = _role_tag(role)
        rec = self.get(model)
        with self.engine.begin() as conn:
            conn.execute(delete(tags_table).where(tags_table.c.tag == tag))
            conn.execute(tags_table.insert().values(tag=tag, model_id=rec.id, bound_by=by, bound_at=utcnow()))
            conn.execute(delete(role_prompts_table).where(role_prompts_table.c.role == role))
            if prompt != "full":
                conn.execute(role_prompts_table.insert().values(role=role, prompt=prompt))
        return self.get(rec.id)

    def role_prompt(self, role: str) -> str:
        """How ``role``'s bound model is prompted: ``full`` unless it was bound with another."""
        with self.engine.connect() as conn:
            row = conn.execute(select(role_prompts_table.c.prompt).where(role_prompts_table.c.role == role)).first()
        return row[0] if row else "full"

    def unbind(self, role: str) -> str | None:
        """Free ``role``; returns the model id it was bound to (None when it was free)."""
        tag = _role_tag(role)
        with self.engine.begin() as conn:
            row = conn.execute(select(tags_table.c.model_id).where(tags_table.c.tag == tag)).first()
            conn.execute(delete(tags_table).where(tags_table.c.tag == tag))
            conn.execute(delete(role_prompts_table).where(role_prompts_table.c.role == role))
        return row[0] if row else None

    # -- reading -------------------------------------------------------------
    def pick_for_role(self, role: str) -> ModelRecord:
        tag = _role_tag(role)
        with self.engine.connect() as conn:
            row = conn.execute(select(tags_table.c.model_id).where(tags_table.c.tag == tag)).first()
        if row is None:
            raise NotFound(f"role {role!r}: no model bound (see `trainteam models bind ROLE MODEL`)")
        return self.get(row[0])

    def get(self, ref: str) -> ModelRecord:
        """A model by id, unique id prefix, or unique name."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(models_table).where(models_table.c.id == ref)).mappings().all()
            if not rows and prefix_allowed(ref):  # LIKE ignores case on SQLite: keep literal prefixes only
                rows = [
                    r
                    for r in conn.execute(
                        select(models_table).where(models_table.c.id.startswith(ref, autoescape=True))
                    ).mappings()
                    if r["id"].startswith(ref)
                ]
            if not rows:
                rows = conn.execute(select(models_table).where(models_table.c.name == ref)).mappings().all()
        if not rows:
            raise NotFound(f"model {ref!r} is not registered (see `trainteam models list`)")
        if len(rows) > 1:
            raise NotFound(f"model {ref!r} is ambiguous: {', '.join(r['id'] for r in rows[:5])}")
        return self._record(rows[0])

    def list(self) -> list[ModelRecord]:
        with self.engine.connect() as conn:
            rows = conn.execute(select(models_table).order_by(models_table.c.created_at)).mappings().all()
        return [self._record(r) for r in rows]

    def roles(self) -> dict[str, str]:
        """role -> model id."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(tags_table.c.tag, tags_table.c.model_id)).all()
        return {t.split(":", 1)[1]: m for t, m in rows if t.startswith("role:")}

    def _by_hash(self, digest: str) -> ModelRecord | None:
        with self.engine.connect() as conn:
            row = conn.execute(select(models_table).where(models_table.c.content_hash == digest)).mappings().first()
        return self._record(row) if row else None

    def _record(self, row) -> ModelRecord:
        with self.engine.connect() as conn:
            tags = conn.execute(select(tags_table.c.tag).where(tags_table.c.model_id == row["id"])).scalars().all()
        roles = sorted(t.split(":", 1)[1] for t in tags if t.startswith("role:"))
        return ModelRecord(**{k: row[k] for k in models_table.c.keys()}, roles=roles)
