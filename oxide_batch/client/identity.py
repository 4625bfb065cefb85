"""What the client says of the process it runs in (decision 315): sent with a
launch, a claim and a step's creation, stored by the server with the claim
(stdlib only)."""

from __future__ import annotations

import os
import socket
from typing import Any

import oxide_batch

#: The client's name and version, as the server shows it ("oxide-batch 0.3.0").
CLIENT = f"oxide-batch {oxide_batch.__version__}"
#: The server's bounds (UTF-8 bytes): a longer host name is cut, not refused.
HOST_MAX_BYTES = 255


def default_host() -> str:
    """``socket.gethostname()``, cut to the server's bound (never empty)."""
    host = socket.gethostname().encode()[:HOST_MAX_BYTES].decode(errors="ignore").strip()
    return host or "unknown"


def worker_identity(*, host: str | None = None, name: str | None = None) -> dict[str, Any]:
    """``{host, pid, name, client}`` of this process, read when sent: a forked
    process sends its own pid. ``host`` defaults to :func:`default_host`."""
    return {
        "host": host if host is not None else default_host(),
        "pid": os.getpid(),
        "name": name,
        "client": CLIENT,
    }
