"""Serializer fields that accept exactly the JSON type they name.

DRF's own fields coerce (``"12"`` and ``12.0`` pass an ``IntegerField``, ``12``
passes a ``CharField``, strings are trimmed); the API refuses instead (contract §4.5:
a number that is not an integer where an integer is expected → 400).
"""

from __future__ import annotations

import enum
from datetime import UTC, datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from oxide_batch.api.converters import IdentifierConverter
from oxide_batch.api.patterns import ascii_pattern, name_pattern, text_pattern
from oxide_batch.api.shapes import name_schema
from oxide_batch.client.wire import format_instant
from oxide_batch.domain.instants import RFC3339_INSTANT
from oxide_batch.domain.names import NameKind, OperatorStringKind
from oxide_batch.domain.partitions import MAX_PARTITION_KEY_BYTES
from oxide_batch.domain.recovery import OVERRIDE_NOTE_MAX_BYTES
from oxide_batch.domain.state import MAX_SCHEMA_VERSION

MAX_BIGINT = 2**63 - 1


def document_as(field: Any, schema: dict[str, Any]) -> None:
    """Document this one field instance with ``schema`` (drf-spectacular adds
    nullable, default and the description); a class-level annotation is kept
    apart, never mutated."""
    inherited = getattr(type(field), "_spectacular_annotation", {})
    field._spectacular_annotation = {**inherited, "field": schema}


ID_SCHEMA: dict[str, Any] = IdentifierConverter.schema


# RFC 3339 with an offset, as ``RFC3339_INSTANT`` reads it, in years 1000–9998 so
# that every offset stays within the years an instant can be converted to UTC in.
INSTANT_SCHEMA: dict[str, Any] = {
    "type": "string",
    "format": "date-time",
    "pattern": (
        "^(?:1[0-9]{3}|[2-8][0-9]{3}|9[0-8][0-9]{2})-(?:0[1-9]|1[0-2])-(?:0[1-9]|[12][0-9]|3[01])"
        "T(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\\.[0-9]{1,9})?"
        "(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])$"
    ),
}


def operator_string_schema(kind: OperatorStringKind) -> dict[str, Any]:
    """What ``validate_operator_string`` accepts (ASCII: exact)."""
    return {
        "type": "string",
        "minLength": 1,
        "maxLength": kind.max_bytes,
        "pattern": ascii_pattern(kind.pattern.pattern.removesuffix("+"), kind.max_bytes),
    }


class StrictIntegerField(serializers.IntegerField):
    """A JSON integer (not a boolean, string or float) within ``min_value..max_value``."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", 0)
        kwargs.setdefault("max_value", MAX_BIGINT)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(data)


@extend_schema_field(ID_SCHEMA)
class IdField(StrictIntegerField):
    """An identifier as a JSON integer; its range (1..2^63−1) is checked by the
    domain, so 0 is ``zero_identifier`` and larger is ``identifier_out_of_range``
    (the schema states the same range)."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("min_value", None)
        kwargs.setdefault("max_value", None)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int:
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return int(data)


class StrictCharField(serializers.CharField):
    """A JSON string, kept as sent (never trimmed); NUL is refused."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("trim_whitespace", False)
        kwargs.setdefault("allow_blank", True)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return data


class NameField(StrictCharField):
    """A name of ``kind``: read as a string here, validated by the domain
    (``validate_name``, so the error names the rule); documented by the same rule."""

    def __init__(self, kind: NameKind, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind
        document_as(self, name_schema(kind))


class NoteField(StrictCharField):
    """An operator's note (an override's): validated by the domain
    (``validate_override_note``: a name's rules at 1000 bytes), documented so."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        document_as(
            self,
            {
                "type": "string",
                "minLength": 1,
                "maxLength": OVERRIDE_NOTE_MAX_BYTES,
                "pattern": name_pattern(OVERRIDE_NOTE_MAX_BYTES),
            },
        )


class OperatorStringField(StrictCharField):
    """A reason code, operation id or actor: validated by the domain
    (``validate_operator_string``), documented by the same character set and limit."""

    def __init__(self, kind: OperatorStringKind, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kind = kind
        document_as(self, operator_string_schema(kind))


@extend_schema_field(
    {"type": "string", "minLength": 32, "maxLength": 32, "pattern": "^[0-9a-f]{32}$"}
)
class OwnerTokenField(StrictCharField):
    """16 bytes as 32 lowercase hex characters (``parse_owner_token`` checks)."""


@extend_schema_field(
    {
        "type": "string",
        "minLength": 1,
        "maxLength": MAX_PARTITION_KEY_BYTES,
        "pattern": text_pattern(MAX_PARTITION_KEY_BYTES),
    }
)
class PartitionKeyField(StrictCharField):
    """A partition key: 1–128 UTF-8 bytes of anything (``validate_partition_key``)."""


class StrictBooleanField(serializers.BooleanField):
    """``true`` or ``false`` only."""

    def to_internal_value(self, data: Any) -> bool:
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class EnumField(serializers.ChoiceField):
    """One of an enum's values, as a JSON string (durable codes); a value outside
    them is refused with the list of valid ones (contract §4.6: errors that say what
    to do)."""

    def __init__(self, enum_class: type[enum.Enum], **kwargs: Any) -> None:
        self.enum_class = enum_class
        super().__init__(choices=[(member.value, member.value) for member in enum_class], **kwargs)
        valid = ", ".join(str(member.value) for member in enum_class)
        self.error_messages = {
            **self.error_messages,
            "invalid_choice": f'"{{input}}" is not a valid choice; valid values: {valid}.',
        }

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, str):
            self.fail("invalid_choice", input=str(data)[:64])
        try:
            return self.enum_class(data)
        except ValueError:
            self.fail("invalid_choice", input=data[:64])

    def to_representation(self, value: Any) -> Any:
        return value.value if isinstance(value, enum.Enum) else value


class DigestField(serializers.RegexField):
    """A SHA-256 digest: 64 lowercase hex characters, nothing around them."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("max_length", 64)
        # DRF trims with str.strip, which also eats U+001C–U+001F and U+0085:
        # a digest with a trailing control character would pass as the digest.
        kwargs.setdefault("trim_whitespace", False)
        super().__init__(r"^[0-9a-f]{64}\Z", **kwargs)

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return str(super().to_internal_value(data))


class InstantField(serializers.DateTimeField):
    """An instant rendered as RFC 3339 UTC with milliseconds (``…T00:00:00.000Z``)."""

    def to_representation(self, value: datetime | None) -> str | None:  # type: ignore[override]
        return format_instant(value)


@extend_schema_field({"type": "object", "additionalProperties": True})
class JSONObjectField(serializers.JSONField):
    """Any JSON object (the domain checks what it must hold)."""

    def to_internal_value(self, data: Any) -> Any:
        if not isinstance(data, dict):
            raise serializers.ValidationError("expected a JSON object", code="not_an_object")
        return data


@extend_schema_field(INSTANT_SCHEMA)
class InstantInputField(serializers.Field):  # type: ignore[type-arg]
    """An RFC 3339 instant as a JSON string with an offset (``Z`` or ``±hh:mm``),
    converted to UTC; without an offset, or out of range → invalid."""

    default_error_messages = {"invalid": "expected an RFC 3339 instant with an offset"}

    def to_internal_value(self, data: Any) -> datetime:
        if not isinstance(data, str) or RFC3339_INSTANT.fullmatch(data) is None:
            self.fail("invalid")
        try:
            value = datetime.fromisoformat(data)
            if value.tzinfo is None:
                self.fail("invalid")
            return value.astimezone(UTC)
        except (ValueError, OverflowError):
            self.fail("invalid")

    def to_representation(self, value: datetime) -> str | None:
        return format_instant(value)


@extend_schema_field(
    {
        "type": "object",
        "properties": {
            "schema": name_schema(NameKind.STATE_SCHEMA),
            "schema_version": {"type": "integer", "minimum": 1, "maximum": MAX_SCHEMA_VERSION},
            "payload": {"type": "object", "additionalProperties": True},
        },
        "required": ["schema", "schema_version", "payload"],
        "additionalProperties": False,
    }
)
class EnvelopeField(serializers.JSONField):
    """A checkpoint, context or partition context envelope: its shape is checked
    by the domain (``StateEnvelope.from_json``, with the size and depth limits
    the schema cannot state); documented with the same members and ranges."""
