"""CLI command groups, one module each. Every module defines ``register(app)`` and keeps
heavy imports (torch, transformers, dbos) inside its command functions."""

COMMAND_MODULES = [
    "models",
    "serve",
    "execute",
    "runs",
    "approvals",
    "graph",
    "workflows",
    "curate",
    "plan",
    "submit",
    "replay",
    "transcripts",
]
