"""JSON Schema ``pattern``s for the strings the domain validates, built from the
domain's own rules (``oxide_batch.domain.names``) so the document and the check
cannot drift apart.

JSON Schema counts characters, the domain counts UTF-8 bytes. A name pattern
is therefore a union of tiers, each a length in characters that cannot exceed
the byte limit whatever the characters: up to the limit in ASCII, half of it in
characters below U+0800, a third below U+10000, a quarter in any characters.
Every string a pattern admits is valid (a schema-valid request is never refused)
but for the few invisible characters beyond the BMP (``name_pattern``);
a rare valid mix (a long name with a few non-ASCII characters) is beyond the
pattern, and the description says so.

The patterns use only what ECMA-262, Python's ``re`` and Rust's ``regex`` read
alike: ``\\xHH`` and ``\\uHHHH`` escapes, classes, ``{m,n}`` and groups.
"""

from __future__ import annotations

from oxide_batch.domain.names import CONTROL_RANGES, INVISIBLE_RANGES, UNICODE_WHITESPACE

# Never in a string the API reads: DRF refuses NUL in every string field. (The
# parser refuses lone surrogates too; they are left out of the classes by the
# BMP tiers, and not named at all: Rust's regex, which validators use, refuses
# a surrogate escape.)
_NEVER = ((0x00, 0x00),)
_SURROGATES = (0xD800, 0xDFFF)
# (highest code point, UTF-8 bytes per character) of each tier.
_TIERS = ((0x7F, 1), (0x7FF, 2), (0xFFFF, 3), (0x10FFFF, 4))


def _escape(code: int) -> str:
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def _ranges(excluded: list[tuple[int, int]], highest: int) -> list[tuple[int, int]]:
    """The code points 0..``highest`` (BMP only) outside ``excluded``."""
    allowed: list[tuple[int, int]] = []
    start = 0
    for low, high in sorted(excluded):
        if low > start:
            allowed.append((start, min(low - 1, highest)))
        start = max(start, high + 1)
        if start > highest:
            break
    if start <= highest:
        allowed.append((start, highest))
    return [(low, high) for low, high in allowed if low <= high]


def _merged(excluded: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for low, high in sorted(excluded):
        if merged and low <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], high))
        else:
            merged.append((low, high))
    return merged


def _class(excluded: list[tuple[int, int]], highest: int) -> str:
    if highest > 0xFFFF:
        # Astral characters cannot be named in a class portably: exclude instead.
        return "[^" + "".join(_span(low, high) for low, high in _merged(excluded)) + "]"
    allowed = _ranges([*excluded, _SURROGATES], highest)
    return "[" + "".join(_span(low, high) for low, high in allowed) + "]"


def _span(low: int, high: int) -> str:
    if low == high:
        return _escape(low)
    return f"{_escape(low)}-{_escape(high)}"


def _whitespace() -> list[tuple[int, int]]:
    return [(ord(character), ord(character)) for character in UNICODE_WHITESPACE]


def _tiered(inner: list[tuple[int, int]], edge: list[tuple[int, int]], max_bytes: int) -> str:
    alternatives = []
    for highest, width in _TIERS:
        count = max_bytes // width
        if count < 1:
            continue
        first = _class(edge, highest)
        middle = _class(inner, highest)
        if count == 1:
            alternatives.append(first)
        elif first == middle:
            alternatives.append(f"{first}{{1,{count}}}")
        else:
            alternatives.append(f"{first}(?:{middle}{{0,{count - 2}}}{first})?")
    return "^(?:" + "|".join(alternatives) + ")$"


def name_pattern(max_bytes: int) -> str:
    """A name (``validate_name``): no control or invisible character, no
    surrounding whitespace, non-empty, at most ``max_bytes`` UTF-8 bytes. (The
    few invisible characters beyond the BMP cannot be named in a portable
    class: the pattern admits them, the server refuses them.)"""
    bmp_invisible = [(low, high) for low, high in INVISIBLE_RANGES if high <= 0xFFFF]
    inner = [*_NEVER, *CONTROL_RANGES, *bmp_invisible]
    return _tiered(inner, [*inner, *_whitespace()], max_bytes)


def text_pattern(max_bytes: int) -> str:
    """Any non-empty string of at most ``max_bytes`` UTF-8 bytes (partition keys)."""
    return _tiered(list(_NEVER), list(_NEVER), max_bytes)


def ascii_pattern(character_class: str, max_bytes: int) -> str:
    """1..``max_bytes`` characters of an ASCII class (operator strings): exact."""
    return f"^{character_class}{{1,{max_bytes}}}$"
