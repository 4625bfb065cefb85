"""Path converters: identifiers and flow node ids.

An identifier segment is any (signed) run of digits, so ``0`` or a number past
2^63−1 reaches the view and is answered 400 (``zero_identifier`` inside
``invalid_request`` / ``identifier_out_of_range``) rather than 404. A node id
may hold any name character, ``/`` included; the domain validates it.

Each converter carries the schema of what the view then accepts (the settings'
``PATH_CONVERTER_OVERRIDES`` read it): an identifier 1..2^63−1, a node id as
``validate_name`` takes it. Pure Python, so the settings may import it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from oxide_batch.api.patterns import name_pattern
from oxide_batch.domain.names import MAX_IDENTIFIER, NameKind

MAX_DIGITS = 4000  # below Python's int-string conversion limit


class IdentifierConverter:
    regex = rf"-?[0-9]{{1,{MAX_DIGITS}}}"
    schema: ClassVar[dict[str, Any]] = {
        "type": "integer",
        "format": "int64",
        "minimum": 1,
        "maximum": MAX_IDENTIFIER,
    }

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(int(value))


class NodeIdConverter:
    regex = ".+"
    schema: ClassVar[dict[str, Any]] = {
        "type": "string",
        "minLength": 1,
        "maxLength": NameKind.NODE.max_bytes,
        "pattern": name_pattern(NameKind.NODE.max_bytes),
    }

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value


class RuleNameConverter:
    """A notification rule's name (``services/notify_rules.RULE_NAME``); any
    other segment matches no route (404)."""

    regex = "[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
    schema: ClassVar[dict[str, Any]] = {
        "type": "string",
        "minLength": 1,
        "maxLength": 64,
        "pattern": f"^{regex}$",
    }

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value
