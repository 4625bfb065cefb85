"""What a caller names things with, validated: opaque identifiers, names and
operator strings.

Identifiers are positive integers that fit a PostgreSQL bigint. Names are
compared byte for byte: nothing here normalises Unicode.
"""

from __future__ import annotations

import enum
import re
import unicodedata

from oxide_batch.domain.errors import (
    EmptyName,
    IdentifierOutOfRange,
    InvalidCharacters,
    NameContainsControl,
    NameContainsInvisible,
    NameHasSurroundingWhitespace,
    NameTooLong,
    ZeroIdentifier,
)

# -- identifiers

MAX_IDENTIFIER = 2**63 - 1


class IdentifierKind(enum.StrEnum):
    JOB_INSTANCE = "job instance"
    JOB_EXECUTION = "job execution"
    STEP_EXECUTION = "step execution"
    STEP_PARTITION = "step partition"
    FAILURE = "failure"
    RECOVERY_DECISION = "recovery decision"
    OPERATOR_REQUEST = "operator request"
    RETENTION_ACTION = "retention action"
    FLOW_DECISION = "flow decision"


def validate_identifier(kind: IdentifierKind, value: int) -> int:
    """Return ``value`` when it is a valid identifier of ``kind``.

    Raises ``ZeroIdentifier`` for 0 (and negatives) and ``IdentifierOutOfRange``
    above 2^63-1.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{kind} identifier must be an int")
    if value <= 0:
        raise ZeroIdentifier(kind=kind.value)
    if value > MAX_IDENTIFIER:
        raise IdentifierOutOfRange(kind=kind.value, value=value)
    return value


# -- names


class NameKind(enum.Enum):
    """What a name names, with its UTF-8 byte limit."""

    JOB = ("job name", 128)
    STEP = ("step name", 128)
    PARAMETER = ("parameter name", 128)
    EXIT_CODE = ("exit code", 64)
    NODE = ("node id", 128)
    REVISION = ("definition revision", 128)
    UPGRADE_KEY = ("upgrade key", 128)
    STATE_SCHEMA = ("state schema", 128)
    # A worker's identity (decision 310): shown beside its executions and steps.
    WORKER_HOST = ("worker host", 255)
    WORKER_NAME = ("worker name", 128)
    WORKER_CLIENT = ("worker client", 128)

    def __init__(self, label: str, max_bytes: int) -> None:
        self.label = label
        self.max_bytes = max_bytes


# Unicode White_Space (what Rust's ``str::trim`` strips). Python's ``str.strip``
# would also strip U+001C–U+001F, which are control characters, not spaces.
UNICODE_WHITESPACE = frozenset(
    "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
    "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def has_surrounding_whitespace(value: str) -> bool:
    return bool(value) and (value[0] in UNICODE_WHITESPACE or value[-1] in UNICODE_WHITESPACE)


# Unicode general category Cc (what Rust's ``char::is_control`` means), as
# inclusive code point ranges (the API's schema patterns are built from them).
CONTROL_RANGES = ((0x00, 0x1F), (0x7F, 0x9F))


def is_control(character: str) -> bool:
    """Unicode general category Cc."""
    code = ord(character)
    return any(low <= code <= high for low, high in CONTROL_RANGES)


# Unicode general categories a name refuses beyond the seed's ``is_control``
# (decision 201): format characters (bidi controls such as U+202E, zero-width
# characters, the BOM) and line/paragraph separators. A name is shown: one of
# these would make it read as another name, or reorder the row around it.
INVISIBLE_CATEGORIES = frozenset({"Cf", "Zl", "Zp"})


# The same categories as inclusive code point ranges (Python 3.11's Unicode
# 14.0; a test checks them against ``unicodedata``), for the API's schema
# patterns, which can name only the Basic Multilingual Plane's.
INVISIBLE_RANGES = (
    (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD), (0x70F, 0x70F),
    (0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200F),
    (0x2028, 0x202E), (0x2060, 0x2064), (0x2066, 0x206F), (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB), (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x13438),
    (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A), (0xE0001, 0xE0001), (0xE0020, 0xE007F),
)  # fmt: skip


def is_invisible(character: str) -> bool:
    """Unicode general category Cf, Zl or Zp."""
    return unicodedata.category(character) in INVISIBLE_CATEGORIES


def _escape(code: int) -> str:
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


# Every invisible character → its escape as Python writes it (``\u202e``).
_VISIBLE = {code: _escape(code) for low, high in INVISIBLE_RANGES for code in range(low, high + 1)}


def escape_invisible(text: str) -> str:
    """``text`` with every invisible character (:data:`INVISIBLE_RANGES`) written
    as its escape, so a name stored before decision 201 (or a partition key,
    which may hold them, contract §2.4.1) shows what it holds instead of
    reordering or hiding the text around it."""
    return text.translate(_VISIBLE)


def validate_name(value: str, kind: NameKind) -> str:
    """Return ``value`` if it is a valid name of ``kind`` by the seed's rule.

    Checked in the seed's order: empty, byte length, surrounding whitespace,
    control characters (reported by index, never by value). What the domain
    holds — a name read back from a row included — passes this; a name being
    written passes :func:`validate_new_name` as well.
    """
    if not isinstance(value, str):
        raise TypeError(f"{kind.label} must be a str")
    if not value:
        raise EmptyName(kind=kind.label)
    if len(value.encode("utf-8")) > kind.max_bytes:
        raise NameTooLong(kind=kind.label, max_bytes=kind.max_bytes)
    if has_surrounding_whitespace(value):
        raise NameHasSurroundingWhitespace(kind=kind.label)
    for index, character in enumerate(value):
        if is_control(character):
            raise NameContainsControl(kind=kind.label, character_index=index)
    return value


def validate_new_name(value: str, kind: NameKind) -> str:
    """:func:`validate_name`, then — a step beyond the seed (decision 201) — no
    invisible character (:func:`is_invisible`, ``NameContainsInvisible``, by
    index). Every path that writes a name calls it (the API's inputs, the
    repository's writes, the commands); a row stored before the rule still
    reads back (:func:`validate_name`), and the console shows it escaped."""
    validate_name(value, kind)
    for index, character in enumerate(value):
        if is_invisible(character):
            raise NameContainsInvisible(kind=kind.label, character_index=index)
    return value


class OperatorStringKind(enum.Enum):
    """Operator strings: their byte limit and character set."""

    ACTOR = ("actor", 128, r"[A-Za-z0-9._:@-]+", "A-Z a-z 0-9 . _ : @ -")
    REASON_CODE = ("reason code", 64, r"[A-Z0-9_]+", "A-Z 0-9 _")
    OPERATION_ID = ("operation id", 64, r"[A-Za-z0-9._:-]+", "A-Z a-z 0-9 . _ : -")
    # What an API token is for (``nightly-runtime``), shown in lists and the console.
    TOKEN_NAME = ("token name", 64, r"[A-Za-z0-9._:@-]+", "A-Z a-z 0-9 . _ : @ -")

    def __init__(self, label: str, max_bytes: int, pattern: str, allowed: str) -> None:
        self.label = label
        self.max_bytes = max_bytes
        self.pattern = re.compile(pattern)
        self.allowed = allowed


def validate_operator_string(value: str, kind: OperatorStringKind) -> str:
    """Return ``value`` if it is 1..max bytes of the kind's character set."""
    if not isinstance(value, str):
        raise TypeError(f"{kind.label} must be a str")
    if not value:
        raise EmptyName(kind=kind.label)
    if len(value.encode("utf-8")) > kind.max_bytes:
        raise NameTooLong(kind=kind.label, max_bytes=kind.max_bytes)
    if kind.pattern.fullmatch(value) is None:
        raise InvalidCharacters(kind=kind.label, allowed=kind.allowed)
    return value


OWNER_TOKEN_BYTES = 16
_OWNER_TOKEN = re.compile(r"[0-9a-f]{32}")


def parse_owner_token(text: str) -> bytes:
    """An owner token: exactly 16 bytes written as 32 lowercase hex characters."""
    if not isinstance(text, str) or _OWNER_TOKEN.fullmatch(text) is None:
        raise InvalidCharacters(kind="owner token", allowed="exactly 32 lowercase hex characters")
    return bytes.fromhex(text)
