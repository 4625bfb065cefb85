"""The request id: taken from ``X-Request-ID`` when it is a sane token, else
generated, and carried by every event through a context variable."""

from __future__ import annotations

import re
import uuid
from contextvars import ContextVar, Token

REQUEST_ID_HEADER = "X-Request-ID"
REQUEST_ID_META = "HTTP_X_REQUEST_ID"
# 1–128 characters of a conservative token alphabet: safe in logs and headers.
REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")

_request_id: ContextVar[str | None] = ContextVar("oxide_batch_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request being served in this context, or ``None`` (commands)."""
    return _request_id.get()


def accept_request_id(candidate: str | None) -> str:
    """``candidate`` when it is 1–128 characters of ``[A-Za-z0-9._:-]``, else a new
    uuid4 hex (a missing, empty, overlong or odd value is replaced, never echoed)."""
    if candidate is not None and REQUEST_ID_PATTERN.fullmatch(candidate):
        return candidate
    return uuid.uuid4().hex


def bind_request_id(request_id: str | None) -> Token[str | None]:
    return _request_id.set(request_id)


def unbind_request_id(token: Token[str | None]) -> None:
    _request_id.reset(token)
