"""Executor ids name the process that runs a workflow, so a dead one can be told from a live one."""

from __future__ import annotations

import os
import socket
import uuid


def new_executor_id() -> str:
    # Unique per launched process: two processes sharing DBOS's default "local"
    # id would both run the same pending step.
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def executor_alive(executor_id: str | None) -> bool | None:
    """True/False for an executor of this host; None when it is on another host."""
    if not executor_id or executor_id.count(":") < 2:
        return False
    host, pid, _ = executor_id.rsplit(":", 2)
    if host != socket.gethostname():
        return None
    import psutil

    try:
        proc = psutil.Process(int(pid))
        return proc.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, ValueError):
        return False
