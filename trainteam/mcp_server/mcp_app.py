"""The MCP server of ``trainteam mcp``: the tools of ``mcp_tools`` on the SDK's ``MCPServer``.

Each tool's input schema is its argument model's fields (flat: ``{"corpus": ..., "execute": true}``),
validated by that model; a refused input or a missing run comes back as a tool error with the
same one line the CLI prints. Every result is masked like everything the CLI prints
(``agents.redact``). stdio by default; ``http_port`` serves streamable HTTP on 127.0.0.1.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field, ValidationError

from trainteam.contract.redaction import redact
from trainteam.core.errors import TrainteamError, format_validation_error
from trainteam.core.listening import bound_socket
from trainteam.mcp_server import artifact_tools as a
from trainteam.mcp_server import mcp_tools as t
from trainteam.mcp_server.train_tools import TRAIN_TOOLS
from trainteam.workspace import Workspace

INSTRUCTIONS = (
    "trainteam's data and training tools. Curation and training tools are plan-first: a call "
    "returns the plan and changes nothing unless execute is true. execute_workflow starts a run "
    "under the task's budget; registering a model and other gated actions wait for a person, who "
    "decides them outside MCP (`trainteam approvals`). No tool here approves or raises a budget."
)
READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True)
PLAN_FIRST = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=True)


class Tools:
    """The tools bound to one workspace, opened on the first call that needs it."""

    def __init__(self, root: Path | None):
        self.root = root

    @cached_property
    def ws(self) -> Workspace:
        """Opened (created, if new) on the first call that needs it, not when the server starts."""
        return Workspace.open(self.root)

    def table(self) -> list[tuple[str, type[BaseModel], Callable[[Any], dict], ToolAnnotations]]:
        """(name, argument model, the function it calls with an instance of that model, hints) per tool."""
        w = lambda fn: lambda args: fn(self.ws, args)  # noqa: E731
        run = lambda fn: lambda args: fn(self.ws.root, lambda: self.ws, args)  # noqa: E731
        return [
            ("curate_corpus", t.CurateCorpusArgs, w(t.curate_corpus), PLAN_FIRST),
            ("dedup_corpus", t.DedupCorpusArgs, w(t.dedup_corpus), PLAN_FIRST),
            ("decontaminate_corpus", t.DecontaminateCorpusArgs, w(t.decontaminate_corpus), PLAN_FIRST),
            ("build_training_dataset", a.BuildTrainingDatasetArgs, w(a.build_training_dataset), PLAN_FIRST),
            ("train_tokenizer", a.TrainTokenizerArgs, w(a.train_tokenizer), PLAN_FIRST),
            ("execute_workflow", t.ExecuteWorkflowArgs, run(t.execute_workflow), PLAN_FIRST),
            *((name, model, run(fn), PLAN_FIRST) for name, model, fn in TRAIN_TOOLS),
            ("merge_adapters_ties", a.MergeAdaptersArgs, w(a.merge_adapters_ties), PLAN_FIRST),
            ("export_model", a.ExportModelArgs, w(a.export_model), PLAN_FIRST),
            ("compose_reward", a.ComposeRewardArgs, a.compose_reward, READ_ONLY),
            ("dataset_lineage", a.DatasetLineageArgs, w(a.dataset_lineage), READ_ONLY),
            ("list_runs", t.ListRunsArgs, w(t.list_runs), READ_ONLY),
            ("show_run", t.RunRef, w(t.show_run), READ_ONLY),
            ("list_approvals", t.ListApprovalsArgs, w(t.list_approvals), READ_ONLY),
            ("show_approval", t.ApprovalRef, w(t.show_approval), READ_ONLY),
            ("lineage", t.NodeRef, w(t.lineage), READ_ONLY),
            ("graph_nodes", t.GraphNodesArgs, w(t.graph_nodes), READ_ONLY),
        ]


def flat_tool(name: str, model: type[BaseModel], run: Callable[[Any], dict]) -> Callable[..., dict]:
    """A function whose signature is ``model``'s fields (the SDK builds the schema from it) and
    whose body validates them as ``model`` and calls ``run``."""
    params = []
    for field, info in model.model_fields.items():
        annotation = (
            Annotated[info.annotation, Field(description=info.description)] if info.description else info.annotation
        )
        default = inspect.Parameter.empty if info.is_required() else info.get_default(call_default_factory=True)
        params.append(inspect.Parameter(field, inspect.Parameter.KEYWORD_ONLY, annotation=annotation, default=default))

    def call(**kwargs: Any) -> dict[str, Any]:
        try:
            return redact(run(model.model_validate(kwargs)))
        except ValidationError as exc:
            raise ToolError(format_validation_error(exc, name)) from None
        except TrainteamError as exc:
            raise ToolError(str(exc)) from None

    # inspect.signature reads __signature__; mypy does not know a function takes one
    call.__signature__ = inspect.Signature(params, return_annotation=dict[str, Any])  # type: ignore[attr-defined]
    call.__name__ = name
    return call


class TeamServer(MCPServer):
    """``MCPServer`` that refuses an argument a tool does not have (the SDK would drop it silently:
    a misspelt ``execute`` would quietly plan instead of failing)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.known_arguments: dict[str, set[str]] = {}

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        known = self.known_arguments.get(name)
        if known is not None:
            unknown = sorted(set(arguments or {}) - known)
            if unknown:
                raise ToolError(f"{name}: unknown argument {unknown[0]!r} (arguments: {', '.join(sorted(known))})")
        return await super().call_tool(name, arguments, context)


def build_server(root: Path | None) -> TeamServer:
    server = TeamServer("trainteam", instructions=INSTRUCTIONS, log_level="WARNING")
    for name, model, run, hints in Tools(root).table():
        server.add_tool(
            flat_tool(name, model, run),
            name=name,
            description=inspect.cleandoc(model.__doc__ or name),
            annotations=hints,
        )
        server.known_arguments[name] = set(model.model_fields)
    return server


def serve(root: Path | None, http_port: int | None = None) -> None:
    """stdio, or streamable HTTP at ``http://127.0.0.1:PORT/mcp`` (the socket bound first: a port in use
    is one line, exit 2)."""
    server = build_server(root)
    if http_port is None:
        server.run("stdio")
        return
    sock = bound_socket("127.0.0.1", http_port, "--http")
    config = uvicorn.Config(server.streamable_http_app(host="127.0.0.1"), log_level="warning")
    uvicorn.Server(config).run(sockets=[sock])
