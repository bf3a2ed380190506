"""`trainteam serve MODEL --port P`: a registered model behind an OpenAI-compatible endpoint."""

from __future__ import annotations

import os
from typing import cast

import typer

from trainteam.commands.common import console, workspace
from trainteam.core.errors import BadInput

DEFAULT_MAX_NEW_TOKENS = 64  # a model registered outside a run (no answer length it was judged at)


def serve(
    model: str = typer.Argument(..., help="model id, unique id prefix, name, or role:NAME"),
    port: int = typer.Option(8000, "--port", "-p", min=0, max=65535, help="port on 127.0.0.1 (0: any free port)"),
    backend: str = typer.Option("auto", "--backend", help="auto | transformers | vllm"),
    max_new_tokens: int | None = typer.Option(
        None,
        "--max-new-tokens",
        min=1,
        help="default when a request gives none (default: the answer length the model was judged at, else 64)",
    ),
) -> None:
    """Serve until interrupted. Set TRAINTEAM_SERVE_API_KEY to require that bearer key."""
    from trainteam.trainers.serving.registry import ModelRegistry

    if backend not in ("auto", "transformers", "vllm"):
        raise BadInput(f"--backend: unknown backend {backend!r} (auto, transformers, vllm)")
    reg = ModelRegistry.of(workspace())
    rec = reg.pick_for_role(model[5:]) if model.startswith("role:") else reg.get(model)
    from trainteam.trainers.serving.endpoint import Backend, ChatServer, serve_model

    api_key = os.environ.get("TRAINTEAM_SERVE_API_KEY") or None
    max_new_tokens = max_new_tokens or int(rec.lineage.get("answer_tokens") or DEFAULT_MAX_NEW_TOKENS)
    server = serve_model(
        rec.path,
        rec.id,
        port=port,
        backend=cast(Backend, backend),  # one of its names: checked above
        api_key=api_key,
        max_new_tokens=max_new_tokens,
    )
    if isinstance(server, ChatServer):
        console.print(f"serving {rec.id} ({rec.name}) at {server.base_url}", highlight=False)
        try:
            server._thread.join() if server._thread else None  # noqa: SLF001
        except KeyboardInterrupt:
            server.stop()
    else:  # vLLM's own server process
        console.print(f"serving {rec.id} ({rec.name}) with vLLM at http://127.0.0.1:{port}/v1", highlight=False)
        try:
            server.wait()
        except KeyboardInterrupt:
            server.terminate()
            server.wait(timeout=30)


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
