"""Path converters: identifiers and flow node ids.

An identifier segment is any (signed) run of digits, so ``0`` or a number past
2^63−1 reaches the view and is answered 400 (``zero_identifier`` inside
``invalid_request`` / ``identifier_out_of_range``) rather than 404. A node id
may hold any name character, ``/`` included; the domain validates it.
"""

from __future__ import annotations

MAX_DIGITS = 4000  # below Python's int-string conversion limit


class IdentifierConverter:
    regex = rf"-?[0-9]{{1,{MAX_DIGITS}}}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(int(value))


class NodeIdConverter:
    regex = ".+"

    def to_python(self, value: str) -> str:
        return value

    def to_url(self, value: str) -> str:
        return value
