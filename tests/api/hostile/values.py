"""Hostile values for a member, chosen by its schema: NUL and other control
characters, lone surrogates, integers past the 64-bit range, floats and booleans
where integers are expected, unknown enum codes, 1 MB strings, nesting past the
limit, …; and the dotted-path helpers that put them in a body."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator
from typing import Any

from tests.api.hostile.schema import resolve

MAX_BIGINT = 2**63 - 1
HUGE = "x" * (1024 * 1024)  # a 1 MB string, within the default 2 MiB body limit
# Members whose free-form JSON is opaque data by contract (stored and returned
# as sent): control characters there are data, not an attack on a name. An
# envelope's ``payload`` is "a JSON object" (contract §2.3.3); inside it, NUL and the
# other control characters are stored as escaped JSON text and answered back
# (test_hostile_text.py), so only the payload as a whole is attacked.
OPAQUE = re.compile(r"(^|\.)payload\.")
OPAQUE_MEMBER = re.compile(r"(^|\.)payload$")
# String members whose contract admits control characters other than NUL
# (partition keys are "1–128 UTF-8 bytes, compared byte for byte, nothing else
# is checked", oxide_batch.domain.partitions).
ADMITS_CONTROL = re.compile(r"^entries\.\d+\.key$")
# String members whose contract stores any text, sanitised and cut to its bound
# (a failure's detail, contract §2, decision 305: a runtime reporting a failure
# is never refused for what its exception said): control characters, lone
# surrogates and a huge string are accepted there — tests/api/test_failure_detail_api.py
# checks what is stored; a value of another JSON type is still a 400. A skipped
# item's detail is kept the same way (test_skips_api.py).
SANITISED = re.compile(r"^(failure|skips\.\d+\.failure)\.detail\.(type|message|traceback)$")
NUL_AND_CONTROLS = ("\x00", "\x01", "\x08", "\x1b", "\x1f", "\x7f", "\x85", "\x9f")
SURROGATES = ("\ud800", "\udfff", "\udbff\udbff")


def string_values(node: dict[str, Any], base: Any, member: str) -> Iterator[tuple[str, Any]]:
    text = base if isinstance(base, str) and base else "x"
    if SANITISED.match(member):
        yield "integer for a string", 1
        yield "boolean for a string", True
        yield "array for a string", [text]
        return
    controls = ("\x00",) if ADMITS_CONTROL.match(member) else NUL_AND_CONTROLS
    for character in controls:
        code = f"U+{ord(character):04X}"
        yield f"{code} inside", text[:1] + character + text[1:]
        yield f"{code} alone", character
        yield f"{code} trailing", text + character
    for surrogate in SURROGATES:
        yield f"lone surrogate {ord(surrogate[0]):X}", text + surrogate
    yield "1 MB", HUGE
    if "enum" in node:
        yield "unknown enum code", "NOT_A_CODE"
        if str(node["enum"][0]).lower() != str(node["enum"][0]):  # not a lower-case enum
            yield "lower-case enum code", str(node["enum"][0]).lower()
        yield "empty enum code", ""
        yield "enum code with NUL", f"{node['enum'][0]}\x00"
    if node.get("format") == "date-time":
        yield "instant without offset", "2025-12-31T00:00:00"
        yield "instant past year 9999", "99999-01-01T00:00:00Z"
        yield "instant out of range", "9999-12-31T23:59:59-23:59"
        yield "instant as digits", "1735689600"
        yield "instant, NUL, garbage", "2025-12-31T00:00:00Z\x00garbage"
        yield "instant with NUL before the offset", "2025-12-31T00:00:00\x00Z"
    yield "integer for a string", 1
    yield "boolean for a string", True
    yield "array for a string", [text]


def integer_values(node: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    yield "2^63", 2**63
    yield "2^64", 2**64
    yield "-2^63-1", -(2**63) - 1
    yield "10^40", 10**40
    maximum = node.get("maximum")
    if maximum is not None and maximum < 2**53 + 1:
        yield "2^53+1", 2**53 + 1
    if maximum is not None and maximum < MAX_BIGINT:
        yield "maximum+1", maximum + 1
    minimum = node.get("minimum")
    if minimum is not None:
        yield "minimum-1", minimum - 1
    yield "float with integral value", 1.0
    yield "float", 1.5
    yield "exponent", 1e3
    yield "true for an integer", True
    yield "false for an integer", False
    yield "string of digits", "1"
    yield "string with NUL", "1\x00"
    yield "object for an integer", {"value": 1}


def boolean_values() -> Iterator[tuple[str, Any]]:
    yield "1 for a boolean", 1
    yield "0 for a boolean", 0
    yield "string for a boolean", "true"
    yield "NUL for a boolean", "\x00"


def deep(levels: int) -> Any:
    value: Any = 1
    for _ in range(levels):
        value = [value]
    return value


def free_json_values(
    base: Any, *, opaque: bool = False, member: str = ""
) -> Iterator[tuple[str, Any]]:
    """NUL and control characters in the keys and leaves of a free-form value
    (not inside an opaque payload, nor in one as a whole: ``opaque``; nor in a
    leaf that is ``SANITISED`` text), a lone surrogate, nesting past 64 levels."""
    for path, leaf in _leaves(base):
        if opaque or OPAQUE.search(path) or SANITISED.match(f"{member}.{path}"):
            continue
        yield f"NUL in {path or 'value'}", replace_at(base, path, f"{leaf}\x00")
    for path in _keys(base):
        if opaque or OPAQUE.search(path):
            continue
        for character in ("\x00", "\x01", "\x7f"):
            yield f"U+{ord(character):04X} in key {path}", rename_at(base, path, character)
    yield "lone surrogate in a key", {"\ud800": 1}
    yield "nested 65 deep", deep(65)
    yield "integer for an object", 7
    yield "string for an object", "x"


def _leaves(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _leaves(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _leaves(child, f"{path}.{index}" if path else str(index))
    elif isinstance(value, str):
        yield path, value


def _keys(value: Any, path: str = "") -> Iterator[str]:
    if isinstance(value, dict):
        for key, child in value.items():
            here = f"{path}.{key}" if path else key
            yield here
            yield from _keys(child, here)
    elif isinstance(value, list):
        for index, child in enumerate(value):
            yield from _keys(child, f"{path}.{index}" if path else str(index))


def _split(path: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in path.split(".")] if path else []


def replace_at(value: Any, path: str, new: Any) -> Any:
    """A copy of ``value`` with the member at a dotted path set to ``new``; an
    optional object the valid body leaves out (e.g. a recovery's ``override``)
    is added around it, so its members are attacked too."""
    result = copy.deepcopy(value)
    parts = _split(path)
    if not parts:
        return new
    holder = result
    for part in parts[:-1]:
        if isinstance(holder, dict) and isinstance(part, str) and part not in holder:
            holder[part] = {}
        holder = holder[part]
    holder[parts[-1]] = new
    return result


def rename_at(value: Any, path: str, character: str) -> Any:
    """A copy of ``value`` with ``character`` appended to the key at a dotted path."""
    result = copy.deepcopy(value)
    parts = _split(path)
    holder = result
    for part in parts[:-1]:
        holder = holder[part]
    holder[parts[-1] + character] = holder.pop(parts[-1])
    return result


def members(
    node: dict[str, Any], base: Any, path: str = ""
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted path, schema) of every member of a body, nested objects and the
    first item of arrays of objects included."""
    node = resolve(node)
    for name, child in node.get("properties", {}).items():
        here = f"{path}.{name}" if path else name
        child = resolve(child)
        yield here, child
        value = base.get(name) if isinstance(base, dict) else None
        if child.get("type") == "object" and "properties" in child:
            yield from members(child, value if isinstance(value, dict) else {}, here)
        items = resolve(child.get("items", {}))
        if child.get("type") == "array" and "properties" in items and value:
            yield from members(items, value[0], f"{here}.0")


def member_values(member: str, node: dict[str, Any], base: Any) -> Iterator[tuple[str, Any]]:
    kind = node.get("type")
    if kind == "string" or "enum" in node:
        yield from string_values(node, base, member)
    elif kind == "integer":
        yield from integer_values(node)
    elif kind == "boolean":
        yield from boolean_values()
    elif kind == "array":
        yield "string for an array", "x"
        yield "object for an array", {"x": 1}
        yield "NUL item", ["\x00"]
        yield "nested 65 deep", deep(65)
    elif kind == "object" and "additionalProperties" in node:
        yield from free_json_values(
            base if isinstance(base, dict) and base else {"k": "v"},
            opaque=bool(OPAQUE_MEMBER.search(member)),
            member=member,
        )
    elif kind == "object" and "properties" in node:
        yield "string for an object", "x"
        yield "array for an object", [base]
    else:  # free-form JSON
        yield from free_json_values(
            base if base is not None else {"k": "v"}, opaque=bool(OPAQUE_MEMBER.search(member))
        )
    if not node.get("nullable"):
        yield "null", None


def value_at(value: Any, path: str) -> Any:
    """The member at a dotted path (``None`` where there is none)."""
    for part in _split(path):
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return None
    return value
