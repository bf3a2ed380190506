"""CLI command groups, one module each. Every module defines ``register(app)``.

A command module is imported for ``trainteam <command> --help`` and a usage error too, so it imports at
its top only what loads nothing beyond the standard library (``common``, ``trainteam.core``, the stdlib
readers); each command function imports the rooms that do its work (pydantic, SQLAlchemy, torch, dbos,
...) when it runs (``tests/architecture/test_import_seams.py`` holds this).

``COMMANDS`` names each top-level command, the module that registers it and the one-line
help ``trainteam --help`` shows: the CLI imports a module only when its command runs, so a
short command does not pay for the other twelve. A test checks the help lines against the
commands' own.
"""

COMMANDS = {
    "serve": ("serve", "Serve until interrupted. Set TRAINTEAM_SERVE_API_KEY to require that bearer key."),
    "execute-workflow": (
        "execute",
        "Run a workflow on a task in this process, durably: if the process dies, "
        "`trainteam runs resume RUN` continues where it stopped.",
    ),
    "worker": ("execute", "Serve runs: takes queued runs and resumes runs whose process died, on any host."),
    "demo": ("execute", "The team at work on the bundled demo request, submitted in natural language."),
    "plan": ("plan", "Plan a run: tokens, memory per device, time and cost, and why; refuse what cannot work."),
    "validate": (
        "validate",
        "Check a task completely (task, model, data, tokens, trl, plan) without starting a run; writes nothing.",
    ),
    "submit": ("submit", "Submit a training request in natural language; the ml_orchestrator turns it into a task."),
    "replay": ("replay", "Show a past run step by step (persona, prompt, tool calls, results, decisions, approvals)."),
    "models": ("models", "Registered models and the roles they serve."),
    "runs": ("runs", "Past and current runs."),
    "approvals": ("approvals", "Gated actions waiting for a person."),
    "graph": ("graph", "The knowledge graph of runs, data and models."),
    "workflows": ("workflows", "Workflow specs."),
    "curate": ("curate", "Curate training data: dedup, decontaminate, filter, version."),
    "transcripts": ("transcripts", "Recorded agent runs (redacted pydantic-ai messages)."),
    "mcp": (
        "mcp_command",
        "Serve the team's curation and training tools, runs, approvals and lineage over MCP (stdio, or --http PORT).",
    ),
    "web": ("web", "Serve the web console (runs, live curves, approvals, lineage) until interrupted."),
    "self-improve": (
        "self_improve",
        "The team trains the model that runs the team: its runs' transcripts → "
        "tool-calling SFT → measured against the offline policy on held-out runs → "
        "gated → bound to the personas.",
    ),
}

COMMAND_MODULES = list(dict.fromkeys(module for module, _ in COMMANDS.values()))
