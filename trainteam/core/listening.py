"""A listening socket for a server the CLI starts (`trainteam web`, `trainteam mcp --http`): bound
before the server runs, so a port in use is one line naming the flag (exit 2), and port 0 gets a
free port the caller can announce."""

from __future__ import annotations

import socket

from trainteam.core.errors import BadInput


def bound_socket(host: str, port: int, flag: str = "--port") -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BadInput(f"{flag}: cannot listen on {host}:{port} ({exc.strerror})") from None
    return sock
