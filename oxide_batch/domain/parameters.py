"""Typed job parameters and the canonical instance key (version-1 digest)."""

from __future__ import annotations

import enum
import hashlib
import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from oxide_batch.domain.errors import (
    DuplicateParameter,
    InvalidParameterValue,
    ParameterStringTooLong,
)
from oxide_batch.domain.names import NameKind, validate_name, validate_new_name

MAX_STRING_PARAMETER_BYTES = 65_536
I64_MIN = -(2**63)
I64_MAX = 2**63 - 1
U64_MAX = 2**64 - 1
KEY_ENCODING_VERSION = 1

ParameterValue = str | int | bool


class ParameterType(enum.StrEnum):
    """The four value types; the value is the JSON ``type`` spelling."""

    STRING = "string"
    I64 = "i64"
    U64 = "u64"
    BOOL = "bool"

    @property
    def tag(self) -> int:
        """The one-byte type tag of the version-1 key encoding."""
        return _TAGS[self]


_TAGS = {ParameterType.STRING: 1, ParameterType.I64: 2, ParameterType.U64: 3, ParameterType.BOOL: 4}


def _check_value(type_: ParameterType, value: object) -> ParameterValue:
    if type_ is ParameterType.STRING:
        if not isinstance(value, str):
            raise InvalidParameterValue(reason="a string parameter needs a string value")
        if len(value.encode("utf-8")) > MAX_STRING_PARAMETER_BYTES:
            raise ParameterStringTooLong(max_bytes=MAX_STRING_PARAMETER_BYTES)
        if "\x00" in value:
            # PostgreSQL cannot store NUL in text or JSONB: refuse it up front.
            raise InvalidParameterValue(reason="a string parameter may not contain NUL")
        return value
    if type_ is ParameterType.BOOL:
        if not isinstance(value, bool):
            raise InvalidParameterValue(reason="a bool parameter needs true or false")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidParameterValue(reason=f"an {type_.value} parameter needs an integer")
    low, high = (I64_MIN, I64_MAX) if type_ is ParameterType.I64 else (0, U64_MAX)
    if not low <= value <= high:
        raise InvalidParameterValue(reason=f"integer out of the {type_.value} range")
    return value


@dataclass(frozen=True, repr=False)
class JobParameter:
    """One typed, validated parameter. Its repr never shows name or value."""

    name: str
    type: ParameterType
    value: ParameterValue
    identifying: bool = True

    def __post_init__(self) -> None:
        validate_name(self.name, NameKind.PARAMETER)
        object.__setattr__(self, "value", _check_value(self.type, self.value))

    def __repr__(self) -> str:
        return f"JobParameter(<redacted>, type={self.type.value}, identifying={self.identifying})"

    @classmethod
    def from_json(cls, name: str, raw: Any, *, identifying: bool = True) -> JobParameter:
        """Read a JSON value: a plain string/bool/integer, or ``{"type", "value"}``.

        A plain integer is I64 when it fits, U64 above 2^63-1 (up to 2^64-1).
        Floats, nulls, lists and other objects are refused.
        """
        if isinstance(raw, Mapping):
            if set(raw) != {"type", "value"}:
                raise InvalidParameterValue(reason="a typed value is {type, value}")
            try:
                type_ = ParameterType(raw["type"])
            except (ValueError, TypeError):
                raise InvalidParameterValue(
                    reason="type must be string, i64, u64 or bool"
                ) from None
            return cls(name, type_, raw["value"], identifying)
        if isinstance(raw, bool):
            return cls(name, ParameterType.BOOL, raw, identifying)
        if isinstance(raw, str):
            return cls(name, ParameterType.STRING, raw, identifying)
        if isinstance(raw, int):
            type_ = ParameterType.I64 if raw <= I64_MAX else ParameterType.U64
            return cls(name, type_, raw, identifying)
        raise InvalidParameterValue(reason="a value is a string, boolean, integer or typed object")

    def encode(self) -> bytes:
        """This parameter's part of the version-1 key encoding."""
        parts = [_length_prefixed(self.name.encode("utf-8")), bytes([self.type.tag])]
        if self.type is ParameterType.STRING:
            assert isinstance(self.value, str)
            parts.append(_length_prefixed(self.value.encode("utf-8")))
        elif self.type is ParameterType.I64:
            parts.append(struct.pack(">q", self.value))
        elif self.type is ParameterType.U64:
            parts.append(struct.pack(">Q", self.value))
        else:
            parts.append(b"\x01" if self.value else b"\x00")
        return b"".join(parts)


def _length_prefixed(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _name_bytes(parameter: JobParameter) -> bytes:
    return parameter.name.encode("utf-8")


@dataclass(frozen=True, repr=False)
class JobInstanceKey:
    """Job name plus the identifying parameters, ordered by name bytes.

    Non-identifying parameters are dropped: they never affect identity.
    """

    job_name: str
    parameters: tuple[JobParameter, ...] = ()

    def __post_init__(self) -> None:
        validate_name(self.job_name, NameKind.JOB)
        names = [parameter.name for parameter in self.parameters]
        if len(set(names)) != len(names):
            raise DuplicateParameter()
        identifying = sorted(
            (parameter for parameter in self.parameters if parameter.identifying),
            key=_name_bytes,
        )
        object.__setattr__(self, "parameters", tuple(identifying))

    @classmethod
    def of(cls, job_name: str, parameters: Iterable[JobParameter] = ()) -> JobInstanceKey:
        return cls(job_name, tuple(parameters))

    def __repr__(self) -> str:
        return f"JobInstanceKey(job_name={self.job_name!r}, parameters=<redacted>)"

    def encode(self) -> bytes:
        """The version-1 canonical byte encoding (stable forever)."""
        parts = [bytes([KEY_ENCODING_VERSION]), _length_prefixed(self.job_name.encode("utf-8"))]
        parts.extend(parameter.encode() for parameter in self.parameters)
        return b"".join(parts)

    @property
    def digest(self) -> str:
        """SHA-256 of the version-1 encoding, lowercase hex."""
        return hashlib.sha256(self.encode()).hexdigest()

    def validate_new(self) -> JobInstanceKey:
        """This key, if its names may be written now: the job name and each
        parameter name pass ``validate_new_name`` (decision 201). A key read
        back from a row is not held to it."""
        validate_new_name(self.job_name, NameKind.JOB)
        for parameter in self.parameters:
            validate_new_name(parameter.name, NameKind.PARAMETER)
        return self

    def descriptors(self) -> list[tuple[str, ParameterType]]:
        """Names and types only — what may be shown without the allowlist."""
        return [(parameter.name, parameter.type) for parameter in self.parameters]
