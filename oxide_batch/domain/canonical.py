"""Canonical JSON: compact, object keys sorted by bytes, strictly parsed.

Checksums and digests are taken over these bytes, so the same value always
hashes the same way. Parsing refuses what JSON allows but we never store:
repeated keys, NaN/Infinity, nesting past a bound.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

MAX_PARSE_DEPTH = 64


class CanonicalJsonError(ValueError):
    """Malformed, ambiguous or too deeply nested JSON."""


def _refuse_constant(name: str) -> Any:
    raise CanonicalJsonError(f"{name} is not JSON")


def _no_repeated_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise CanonicalJsonError("an object repeats a key")
        result[key] = value
    return result


def parse_strict(text: str | bytes) -> Any:
    """Parse JSON, refusing repeated keys and NaN/Infinity."""
    try:
        return json.loads(
            text, object_pairs_hook=_no_repeated_keys, parse_constant=_refuse_constant
        )
    except CanonicalJsonError:
        raise
    except json.JSONDecodeError as error:
        # Where the parser stopped, so the sender can find it (no text of the body).
        raise CanonicalJsonError(
            f"malformed JSON at line {error.lineno}, column {error.colno}: {error.msg}"
        ) from None
    except (ValueError, RecursionError):
        raise CanonicalJsonError("malformed JSON") from None


def depth(value: Any) -> int:
    """Nesting depth: a scalar is 0, ``{}`` or ``[]`` is 1, and so on.

    Iterative, so hostile nesting cannot exhaust the Python stack.
    """
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            level += 1
            stack.extend((child, level) for child in item.values())
        elif isinstance(item, list):
            level += 1
            stack.extend((child, level) for child in item)
        deepest = max(deepest, level)
    return deepest


def contains_float(value: Any) -> bool:
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float):
            return True
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def canonical_bytes(value: Any) -> bytes:
    """Compact UTF-8 JSON with keys sorted (code-point order = UTF-8 byte order)."""
    try:
        text = json.dumps(
            value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        )
    except (TypeError, ValueError) as error:
        raise CanonicalJsonError(f"not representable as JSON: {error}") from None
    return text.encode("utf-8")


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
