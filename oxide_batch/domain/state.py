"""Durable state envelopes: step checkpoints, execution contexts, partition contexts.

An envelope is ``{schema, schema_version (>= 1), payload (a JSON object)}``. It
is stored as its canonical bytes with a SHA-256 checksum and verified on every
read: anything that does not verify fails closed (the caller raises
``fault_state_corrupt`` or ``partition_state_corrupt``), never guesses.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from oxide_batch.domain.canonical import (
    CanonicalJsonError,
    canonical_bytes,
    depth,
    parse_strict,
    sha256_hex,
)
from oxide_batch.domain.errors import DomainError, InvalidEnvelope
from oxide_batch.domain.names import NameKind, validate_name

DEFAULT_MAX_BYTES = 64 * 1024
DEFAULT_MAX_DEPTH = 16
CEILING_MAX_BYTES = 1024 * 1024
CEILING_MAX_DEPTH = 64
PARTITION_CONTEXT_MAX_BYTES = 4 * 1024
MAX_SCHEMA_VERSION = 2**31 - 1


class EnvelopeKind(enum.StrEnum):
    CHECKPOINT = "checkpoint"
    CONTEXT = "context"
    PARTITION_CONTEXT = "partition context"


@dataclass(frozen=True)
class StateLimits:
    """Size (canonical bytes) and depth (the envelope root counts as 1) bounds,
    and what sets each (a setting's name, named in a refusal; ``None``: fixed)."""

    max_bytes: int = DEFAULT_MAX_BYTES
    max_depth: int = DEFAULT_MAX_DEPTH
    bytes_set_by: str | None = None
    depth_set_by: str | None = None

    def __post_init__(self) -> None:
        if not 1 <= self.max_bytes <= CEILING_MAX_BYTES:
            raise ValueError(f"max_bytes must be 1..{CEILING_MAX_BYTES}")
        if not 1 <= self.max_depth <= CEILING_MAX_DEPTH:
            raise ValueError(f"max_depth must be 1..{CEILING_MAX_DEPTH}")


def _set_by(setting: str | None) -> str:
    """What a refusal adds about the limit it names: the setting that sets it."""
    return f" (the setting {setting} sets it)" if setting else " (a fixed limit)"


PARTITION_CONTEXT_LIMITS = StateLimits(PARTITION_CONTEXT_MAX_BYTES, DEFAULT_MAX_DEPTH)
_CEILINGS = StateLimits(CEILING_MAX_BYTES, CEILING_MAX_DEPTH)
_MEMBERS = frozenset({"schema", "schema_version", "payload"})


@dataclass(frozen=True, repr=False)
class StateEnvelope:
    """A validated envelope. Its repr never shows the payload."""

    schema: str
    schema_version: int
    payload: Mapping[str, Any]
    # What a check measured (canonical bytes, depth), kept so that checking
    # the same envelope against other limits serializes nothing again.
    _measured: tuple[bytes, int] | None = field(
        default=None, init=False, repr=False, compare=False, hash=False
    )

    def __repr__(self) -> str:
        return (
            f"StateEnvelope(schema={self.schema!r}, schema_version={self.schema_version}, "
            "payload=<redacted>)"
        )

    @classmethod
    def from_json(
        cls, raw: Any, *, kind: EnvelopeKind, limits: StateLimits = StateLimits()
    ) -> StateEnvelope:
        """Validate a decoded JSON value; ``InvalidEnvelope`` names what is wrong."""
        return cls._checked(raw, kind, limits)[0]

    @classmethod
    def _checked(
        cls, raw: Any, kind: EnvelopeKind, limits: StateLimits
    ) -> tuple[StateEnvelope, bytes]:
        """``from_json``, also returning the canonical bytes it measured."""
        if not isinstance(raw, Mapping) or set(raw) != _MEMBERS:
            raise InvalidEnvelope(
                kind=kind.value, reason="expected {schema, schema_version, payload}"
            )
        schema, version, payload = raw["schema"], raw["schema_version"], raw["payload"]
        if not isinstance(schema, str):
            raise InvalidEnvelope(kind=kind.value, reason="schema must be a string")
        try:
            validate_name(schema, NameKind.STATE_SCHEMA)
        except DomainError as error:
            raise InvalidEnvelope(kind=kind.value, reason=str(error)) from None
        if isinstance(version, bool) or not isinstance(version, int):
            raise InvalidEnvelope(kind=kind.value, reason="schema_version must be an integer")
        if not 1 <= version <= MAX_SCHEMA_VERSION:
            raise InvalidEnvelope(kind=kind.value, reason="schema_version must be at least 1")
        if not isinstance(payload, Mapping):
            raise InvalidEnvelope(kind=kind.value, reason="payload must be a JSON object")
        envelope = cls(schema, version, dict(payload))
        levels = 1 + depth(envelope.payload)
        # Depth first: a too deep payload is never serialized.
        cls._shallow_enough(levels, kind, limits)
        try:
            data = envelope.canonical()
        except CanonicalJsonError as error:
            raise InvalidEnvelope(kind=kind.value, reason=str(error)) from None
        cls._small_enough(data, kind, limits)
        object.__setattr__(envelope, "_measured", (data, levels))
        return envelope, data

    @staticmethod
    def _within(data: bytes, levels: int, kind: EnvelopeKind, limits: StateLimits) -> None:
        StateEnvelope._shallow_enough(levels, kind, limits)
        StateEnvelope._small_enough(data, kind, limits)

    @staticmethod
    def _shallow_enough(levels: int, kind: EnvelopeKind, limits: StateLimits) -> None:
        if levels > limits.max_depth:
            raise InvalidEnvelope(
                kind=kind.value,
                reason=f"nested {levels} levels deep, deeper than the limit of "
                f"{limits.max_depth}{_set_by(limits.depth_set_by)}",
            )

    @staticmethod
    def _small_enough(data: bytes, kind: EnvelopeKind, limits: StateLimits) -> None:
        if len(data) > limits.max_bytes:
            raise InvalidEnvelope(
                kind=kind.value,
                reason=f"{len(data)} bytes of canonical JSON, larger than the limit of "
                f"{limits.max_bytes} bytes{_set_by(limits.bytes_set_by)}",
            )

    def as_json(self) -> dict[str, Any]:
        return {
            "schema": self.schema,
            "schema_version": self.schema_version,
            "payload": dict(self.payload),
        }

    def canonical(self) -> bytes:
        return canonical_bytes(self.as_json())

    @property
    def checksum(self) -> str:
        return sha256_hex(self.canonical())


@dataclass(frozen=True)
class StoredState:
    """What a row holds for one envelope: its canonical text and checksum."""

    text: str
    checksum: str

    @classmethod
    def of(cls, envelope: StateEnvelope) -> StoredState:
        return cls._of_bytes(envelope.canonical())

    @classmethod
    def checked(
        cls, envelope: StateEnvelope, *, kind: EnvelopeKind, limits: StateLimits
    ) -> StoredState:
        """``StoredState.of(StateEnvelope.from_json(envelope.as_json(), …))``: the
        envelope re-checked against ``limits`` (``InvalidEnvelope``), serialized once
        — not at all when a check already measured it (its rules but the limits
        do not depend on them: only size and depth are compared again)."""
        measured = envelope._measured
        if measured is None:
            return cls._of_bytes(StateEnvelope._checked(envelope.as_json(), kind, limits)[1])
        data, levels = measured
        StateEnvelope._within(data, levels, kind, limits)
        return cls._of_bytes(data)

    @classmethod
    def _of_bytes(cls, data: bytes) -> StoredState:
        return cls(data.decode("utf-8"), sha256_hex(data))


class StoredStateCorrupt(Exception):
    """A stored envelope that does not verify (the caller maps it to its kind)."""


def load_stored(text: str, checksum: str, *, kind: EnvelopeKind) -> StateEnvelope:
    """Verify the checksum over the stored bytes, then re-validate the envelope.

    Raises ``StoredStateCorrupt`` for any mismatch or malformed content.
    """
    data = text.encode("utf-8")
    if sha256_hex(data) != checksum:
        raise StoredStateCorrupt("checksum mismatch")
    try:
        envelope, canonical = StateEnvelope._checked(parse_strict(data), kind, _CEILINGS)
    except (CanonicalJsonError, InvalidEnvelope) as error:
        raise StoredStateCorrupt(str(error)) from None
    if canonical != data:
        raise StoredStateCorrupt("stored bytes are not canonical")
    return envelope
