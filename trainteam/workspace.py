"""A workspace: one folder holding the database and the artifacts tree.

Everything a run produces lives under one root (``--workspace`` or
``TRAINTEAM_HOME``, default ``./.trainteam``) so that a workspace can be copied,
archived or deleted as a unit.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

from sqlalchemy.engine import Engine

from trainteam.db import SchemaTooNew, ensure_schema, make_engine
from trainteam.errors import BadInput
from trainteam.settings import Settings

ARTIFACT_DIRS = ("datasets", "tokenizers", "checkpoints", "models", "transcripts", "reports", "logs")


def _register_tables() -> None:
    # Importing these modules adds their tables to trainteam.db.metadata.
    import trainteam.graph.store  # noqa: F401
    import trainteam.workflows.store  # noqa: F401
    import trainteam.agents.registry  # noqa: F401


class Workspace:
    def __init__(self, root: Path, settings: Settings):
        self.root = root
        self.settings = settings

    @classmethod
    def open(cls, root: str | Path | None = None, settings: Settings | None = None) -> "Workspace":
        settings = settings or Settings()
        root_path = Path(root) if root is not None else settings.home
        if root_path.exists() and not root_path.is_dir():
            raise BadInput(f"workspace: {root_path} exists and is not a folder")
        root_path = root_path.resolve()
        root_path.mkdir(parents=True, exist_ok=True)
        for d in ARTIFACT_DIRS:
            (root_path / d).mkdir(exist_ok=True)
        ws = cls(root_path, settings)
        _register_tables()
        try:
            ensure_schema(ws.engine)
        except SchemaTooNew as exc:
            raise BadInput(f"workspace {root_path}: {exc}") from None
        return ws

    @property
    def database_url(self) -> str:
        return self.settings.database_url or f"sqlite:///{self.root / 'trainteam.db'}"

    @property
    def dbos_database_url(self) -> str:
        return self.settings.dbos_database_url or f"sqlite:///{self.root / 'dbos.sqlite'}"

    @cached_property
    def engine(self) -> Engine:
        return make_engine(self.database_url)

    def dir(self, kind: str) -> Path:
        if kind not in ARTIFACT_DIRS:
            raise ValueError(f"unknown artifact folder {kind!r}")
        return self.root / kind

    @cached_property
    def graph(self):
        from trainteam.graph import KnowledgeGraph

        return KnowledgeGraph(self.engine)
