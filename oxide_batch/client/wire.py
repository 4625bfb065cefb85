"""The wire format shared by the API and its client (no Django here).

Problems (RFC 9457 ``application/problem+json``) carry ``{type, title, status,
code, detail}`` and the error's structured fields as further members. A field
whose name is a problem member is renamed on the wire (``status`` →
``batch_status``, anything else → ``error_<name>``) so the HTTP status stays
where RFC 9457 puts it; :func:`field_name` undoes the renaming.

Instants are RFC 3339 UTC with milliseconds: ``2026-01-01T00:00:00.000Z``.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

PROBLEM_CONTENT_TYPE = "application/problem+json"
PROBLEM_TYPE_PREFIX = "urn:oxide-batch:problem:"
INVALID_REQUEST = "invalid_request"
PROBLEM_MEMBERS = frozenset(
    {"type", "title", "status", "code", "detail", "instance", "errors", "request_id"}
)
ERROR_ENTRY_MEMBERS = frozenset({"code", "message"})
_RENAMED = {"status": "batch_status"}
_RENAMED_BACK = {value: key for key, value in _RENAMED.items()}
_PREFIX = "error_"


def problem_member(name: str, reserved: frozenset[str] = PROBLEM_MEMBERS) -> str:
    """The member name an error field is carried under."""
    if name not in reserved:
        return name
    return _RENAMED.get(name, _PREFIX + name)


def field_name(member: str) -> str:
    """The error field a problem member carries (inverse of :func:`problem_member`)."""
    if member in _RENAMED_BACK:
        return _RENAMED_BACK[member]
    if member.startswith(_PREFIX) and member[len(_PREFIX) :] in PROBLEM_MEMBERS | {"message"}:
        return member[len(_PREFIX) :]
    return member


def error_fields(document: Mapping[str, Any], reserved: frozenset[str]) -> dict[str, Any]:
    """The error's own fields in a problem (or an ``errors`` entry)."""
    return {field_name(key): value for key, value in document.items() if key not in reserved}


def format_instant(instant: datetime | None) -> str | None:
    """RFC 3339 UTC with milliseconds, e.g. ``2026-01-01T00:00:00.000Z``."""
    if instant is None:
        return None
    if instant.tzinfo is None:
        raise ValueError("instants must be timezone-aware")
    utc = instant.astimezone(UTC)
    return utc.strftime("%Y-%m-%dT%H:%M:%S.") + f"{utc.microsecond // 1000:03d}Z"


def parse_instant(text: str | None) -> datetime | None:
    """Read an instant written by :func:`format_instant` (any RFC 3339 offset)."""
    if text is None:
        return None
    value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if value.tzinfo is None:
        raise ValueError("an instant needs an offset")
    return value.astimezone(UTC)
