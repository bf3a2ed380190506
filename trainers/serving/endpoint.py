"""The serving seam: a registered model behind an OpenAI-compatible endpoint on 127.0.0.1.

Any OpenAI-compatible client (the ``openai`` package, pydantic-ai's OpenAI or vLLM
provider) can then use a model the team trained, so a persona can be bound to it
by configuration. Two backends:

- ``transformers``: stdlib ``http.server`` + ``model.generate``; no extra package,
  fine for the small models trained here; requests are served one at a time;
  ``stream: true`` sends server-sent events from transformers' ``TextIteratorStreamer``.
- ``vllm``: when vLLM is installed and a GPU is present, its own OpenAI server is
  started on the checkpoint folder (``vllm serve``); nothing of it is re-implemented.

Prompts are built by ``curation.formats.prompt_ids``, the function evaluation uses: a
tokenizer with a chat template gets the messages through it; one without (the team's
task models) gets the last user message in the plain training format, which is what it
learned to answer. So the prompt tokens served are the ones the judge evaluated.

Tool calling (``tools``, ``tool_choice``) follows OpenAI's contract: the tools go into the chat
template, and the model's ``<tool_call>`` output comes back as ``message.tool_calls`` (streamed as
``delta.tool_calls``) with ``finish_reason: "tool_calls"``, parsed by transformers' own response
parser (``served_tools.py``, which also says why ``transformers serve`` is not the server here).
"""

from __future__ import annotations

import importlib.util
import json
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

from trainteam.core.errors import BadInput
from trainteam.curation.formats import PromptFormat, prompt_format, prompt_ids
from trainteam.trainers.serving.tool_calls import (
    StreamedCalls,
    ToolRequestError,
    ToolSet,
    parse_output,
    parse_prefix,
    template_messages,
    tool_set,
)
from trainteam.trainers.training.models import load_model
from trainteam.trainers.training.tokenizer import load_tokenizer

Backend = Literal["auto", "transformers", "vllm"]


class _RequestError(Exception):
    def __init__(self, status: HTTPStatus, message: str, param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.param = status, message, param


def _text_parts(message: dict[str, Any]) -> dict[str, Any]:
    """A message whose OpenAI content parts (``[{"type": "text", "text": ...}]``) are joined to one string."""
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return {**message, "content": content}


@dataclass
class _Prepared:
    """A checked request: the encoded prompt, ``generate``'s arguments, the tools offered and the
    prompt as text (the tool-call parser's prefix)."""

    enc: dict[str, Any]
    kwargs: dict[str, Any]
    tools: ToolSet
    prefix: str

    @property
    def n_prompt(self) -> int:
        return int(self.enc["input_ids"].shape[1])


class ChatModel:
    """A loaded checkpoint that answers chat messages (greedy at temperature 0)."""

    def __init__(self, path: str | Path, model_id: str, *, max_new_tokens: int = 64):
        self.path = Path(path)
        self.model_id = model_id
        self.max_new_tokens = max_new_tokens
        self.model = load_model(self.path).eval()
        self.tokenizer = load_tokenizer(self.path)
        self.prompt_format: PromptFormat = prompt_format(self.tokenizer)
        self.created = int(time.time())
        self._lock = threading.Lock()  # one generate at a time: torch threads are shared

    def _prompt_ids(self, messages: list[dict[str, Any]], tools: list | None = None) -> list[int]:
        """The prompt's tokens, built as evaluation builds them (``formats.prompt_ids``): the chat
        template over the messages (and the tools offered), or, for a model without one, the last
        user message in the plain training format."""
        tok = self.tokenizer
        if self.prompt_format == "chat":
            return prompt_ids(tok, template_messages([_text_parts(m) for m in messages]), "chat", tools=tools or None)
        users = [m for m in messages if m.get("role") == "user"]
        if not users:
            raise _RequestError(HTTPStatus.BAD_REQUEST, "messages: needs a user message", "messages")
        return prompt_ids(tok, str(_text_parts(users[-1]).get("content")), "plain")

    def _prepare(self, body: dict[str, Any]) -> _Prepared:
        """Validate a request; return the encoded prompt, the ``generate`` arguments and the tools."""
        import torch

        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise _RequestError(HTTPStatus.BAD_REQUEST, "messages: a non-empty list is required", "messages")
        if int(body.get("n") or 1) != 1:
            raise _RequestError(HTTPStatus.BAD_REQUEST, "n: only 1 choice is supported", "n")
        max_new = body.get("max_completion_tokens") or body.get("max_tokens") or self.max_new_tokens
        if not isinstance(max_new, int) or max_new <= 0:
            raise _RequestError(HTTPStatus.BAD_REQUEST, "max_tokens: a positive integer is required", "max_tokens")
        given_temperature = body.get("temperature")
        temperature = float(given_temperature) if given_temperature is not None else 0.0
        tok = self.tokenizer
        try:
            tools = tool_set(body)
        except ToolRequestError as exc:
            raise _RequestError(exc.status, exc.message, exc.param) from None
        ids = self._prompt_ids(messages, tools.tools)
        enc = {
            "input_ids": torch.tensor([ids], device=self.model.device),
            "attention_mask": torch.ones(1, len(ids), dtype=torch.long, device=self.model.device),
        }
        kwargs: dict[str, Any] = {
            "max_new_tokens": max_new,
            "pad_token_id": tok.pad_token_id,
            "eos_token_id": tok.eos_token_id,
        }
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=float(body.get("top_p") or 1.0))
            if body.get("seed") is not None:
                torch.manual_seed(int(body["seed"]))
        else:
            kwargs["do_sample"] = False
        return _Prepared(enc, kwargs, tools, parse_prefix(tok, tok.decode(ids, skip_special_tokens=False)))

    def _head(self) -> dict[str, Any]:
        return {"id": f"chatcmpl-{secrets.token_hex(12)}", "created": int(time.time()), "model": self.model_id}

    def _usage(self, n_prompt: int, n_gen: int) -> dict[str, int]:
        return {"prompt_tokens": n_prompt, "completion_tokens": n_gen, "total_tokens": n_prompt + n_gen}

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        import torch

        req = self._prepare(body)
        tok = self.tokenizer
        with self._lock, torch.no_grad():
            out = self.model.generate(**req.enc, **req.kwargs)
        gen = out[0, req.n_prompt :].tolist()
        stopped = tok.eos_token_id in gen
        if stopped:
            gen = gen[: gen.index(tok.eos_token_id)]
        clean = tok.decode(gen, skip_special_tokens=True)
        content, calls = parse_output(tok, tok.decode(gen, skip_special_tokens=False), clean, req.prefix, req.tools)
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            message["tool_calls"] = calls
        finish = "tool_calls" if calls else ("stop" if stopped else "length")
        return {
            **self._head(),
            "object": "chat.completion",
            "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            "usage": self._usage(req.n_prompt, len(gen) + int(stopped)),
        }

    def stream(self, body: dict[str, Any]) -> Generator[dict[str, Any], None, None]:
        """``chat.completion.chunk`` objects as tokens are generated (transformers' streamer); with
        tools, content and each tool call as the parser closes it (``delta.tool_calls``)."""
        import torch
        from transformers import TextIteratorStreamer

        req = self._prepare(body)
        head = self._head()
        # with tools the parser sees the special tokens too (a delimiter may be one)
        streamer = TextIteratorStreamer(self.tokenizer, skip_prompt=True, skip_special_tokens=not req.tools.parse)
        calls = StreamedCalls(self.tokenizer, req.prefix, req.tools) if req.tools.parse else None
        result: dict[str, Any] = {}

        def _run() -> None:
            with torch.no_grad():
                result["out"] = self.model.generate(**req.enc, **req.kwargs, streamer=streamer)

        def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                **head,
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }

        with self._lock:
            worker = threading.Thread(target=_run, daemon=True)
            worker.start()
            yield _chunk({"role": "assistant", "content": ""})
            for piece in streamer:
                deltas = calls.feed(piece) if calls is not None else ([{"content": piece}] if piece else [])
                for delta in deltas:
                    yield _chunk(delta)
            if calls is not None:
                for delta in calls.feed("", last=True):
                    yield _chunk(delta)
            worker.join()
        gen = result["out"][0, req.n_prompt :].tolist()
        eos = self.tokenizer.eos_token_id
        stopped = eos in gen
        n_gen = gen.index(eos) + 1 if stopped else len(gen)
        finish = "tool_calls" if calls is not None and calls.calls else ("stop" if stopped else "length")
        yield _chunk({}, finish)
        if (body.get("stream_options") or {}).get("include_usage"):
            yield {**head, "object": "chat.completion.chunk", "choices": [], "usage": self._usage(req.n_prompt, n_gen)}

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": self.model_id, "object": "model", "created": self.created, "owned_by": "trainteam"}],
        }


def _chain(first: dict[str, Any], rest: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    yield first
    yield from rest


class _ChatHandler(BaseHTTPRequestHandler):
    """The OpenAI routes over one ``ChatModel``; ``_handler`` makes the subclass that holds the model and key."""

    chat: ChatModel
    api_key: str | None = None
    server_version = "trainteam-serve"
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: with Nagle on, the client's delayed ACK
    # added ~40 ms to every response here.
    disable_nagle_algorithm = True

    def log_message(self, fmt, *args):  # quiet; requests are not logged (they may hold data)
        pass

    def _send(self, status: HTTPStatus, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_stream(self, chunks: Generator[dict[str, Any], None, None]) -> None:
        """Server-sent events; the first chunk is made before the headers go out, so a bad
        request still gets a JSON error."""
        first = next(chunks)
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for chunk in _chain(first, chunks):
                self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away; the connection closes
        finally:
            chunks.close()  # releases the model lock even when the client left early

    def _error(self, e: _RequestError) -> None:
        kind = "invalid_request_error" if e.status < 500 else "server_error"
        self._send(e.status, {"error": {"message": e.message, "type": kind, "param": e.param, "code": None}})

    def _authorized(self) -> bool:
        if self.api_key is None:
            return True
        if self.headers.get("Authorization", "") == f"Bearer {self.api_key}":
            return True
        self._error(_RequestError(HTTPStatus.UNAUTHORIZED, "invalid API key"))
        return False

    def do_GET(self):  # noqa: N802 (http.server's naming)
        if not self._authorized():
            return
        if self.path.rstrip("/") == "/v1/models":
            return self._send(HTTPStatus.OK, self.chat.models())
        if self.path.rstrip("/") == f"/v1/models/{self.chat.model_id}":
            return self._send(HTTPStatus.OK, self.chat.models()["data"][0])
        self._error(_RequestError(HTTPStatus.NOT_FOUND, f"no route {self.path}"))

    def do_POST(self):  # noqa: N802
        if not self._authorized():
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._error(_RequestError(HTTPStatus.NOT_FOUND, f"no route {self.path}"))
        try:
            self._complete(raw)
        except json.JSONDecodeError as exc:
            self._error(_RequestError(HTTPStatus.BAD_REQUEST, f"body: not JSON ({exc.msg})"))
        except _RequestError as exc:
            self._error(exc)
        except Exception as exc:  # the server keeps serving; the client gets the reason
            self._error(_RequestError(HTTPStatus.INTERNAL_SERVER_ERROR, f"{type(exc).__name__}: {exc}"))

    def _complete(self, raw: bytes) -> None:
        """One chat completion: the whole answer as JSON, or streamed as server-sent events."""
        body = json.loads(raw or b"{}")
        if not isinstance(body, dict):
            raise _RequestError(HTTPStatus.BAD_REQUEST, "body: a JSON object is required")
        if body.get("model") not in (None, self.chat.model_id):
            raise _RequestError(
                HTTPStatus.NOT_FOUND,
                f"model {body.get('model')!r} is not served here (serving {self.chat.model_id!r})",
                "model",
            )
        if body.get("stream"):
            return self._send_stream(self.chat.stream(body))
        self._send(HTTPStatus.OK, self.chat.complete(body))


def _handler(chat: ChatModel, api_key: str | None) -> type[_ChatHandler]:
    """The request handler class for one server: ``http.server`` builds one per connection."""
    return type("Handler", (_ChatHandler,), {"chat": chat, "api_key": api_key})


class ChatServer:
    """An OpenAI-compatible server for one model, on 127.0.0.1. ``port=0`` picks a free port."""

    def __init__(self, chat: ChatModel, *, port: int = 0, api_key: str | None = None, host: str = "127.0.0.1"):
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise BadInput(f"host {host!r}: the serving seam only listens on the loopback interface")
        self.chat = chat
        self.httpd = ThreadingHTTPServer((host, port), _handler(chat, api_key))
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> ChatServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="trainteam-serve", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> ChatServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def choose_backend(backend: Backend = "auto") -> Literal["transformers", "vllm"]:
    has_vllm = importlib.util.find_spec("vllm") is not None
    if backend == "vllm" and not has_vllm:
        raise BadInput("--backend vllm: vLLM is not installed (pip install vllm on a GPU machine)")
    if backend == "auto":
        if not has_vllm:
            return "transformers"
        import torch

        return "vllm" if torch.cuda.is_available() else "transformers"
    return backend


def vllm_command(path: str | Path, model_id: str, port: int, api_key: str | None = None) -> list[str]:
    """vLLM's own OpenAI server on the checkpoint folder (remote code stays off; tool calls parsed
    by its Hermes parser, the shape ``served_tools`` parses)."""
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(path),
        "--served-model-name",
        model_id,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ]  # the tool-call contract ours keeps
    if api_key:
        cmd += ["--api-key", api_key]
    return cmd


def serve_model(
    path: str | Path,
    model_id: str,
    *,
    port: int,
    backend: Backend = "auto",
    api_key: str | None = None,
    max_new_tokens: int = 64,
) -> ChatServer | subprocess.Popen:
    """Start serving: a started ``ChatServer`` (transformers) or the vLLM server process."""
    if choose_backend(backend) == "vllm":
        return subprocess.Popen(vllm_command(path, model_id, port, api_key))
    return ChatServer(ChatModel(path, model_id, max_new_tokens=max_new_tokens), port=port, api_key=api_key).start()
