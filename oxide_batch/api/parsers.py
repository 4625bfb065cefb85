"""A strict JSON parser: what JSON allows but the API refuses (contract §4.5).

Repeated keys, NaN/Infinity, nesting deeper than 64 levels, invalid UTF-8 and
lone surrogates are 400 ``invalid_request`` (``errors.body``); a body larger
than ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is refused by Django before parsing (413).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from oxide_batch.domain.canonical import MAX_PARSE_DEPTH, CanonicalJsonError, depth, parse_strict


def _check_strings(value: Any) -> None:
    """Every key and string must be encodable as UTF-8 (no lone surrogates)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8")
        elif isinstance(item, dict):
            for key, child in item.items():
                key.encode("utf-8")
                stack.append(child)
        elif isinstance(item, list):
            stack.extend(item)


class StrictJSONParser(JSONParser):
    """``application/json`` read with ``oxide_batch.domain.canonical.parse_strict``."""

    media_type = "application/json"

    def parse(
        self,
        stream: Any,
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        data = stream.read()
        try:
            text = data.decode("utf-8") if isinstance(data, bytes) else str(data)
        except UnicodeDecodeError:
            raise ParseError("the body is not valid UTF-8", code="invalid_encoding") from None
        try:
            value = parse_strict(text)
        except CanonicalJsonError as error:
            message = str(error)
            code = "malformed_json"
            if "repeats a key" in message:
                code = "repeated_key"
            elif "is not JSON" in message:
                code = "non_finite_number"
            raise ParseError(message, code=code) from None
        if depth(value) > MAX_PARSE_DEPTH:
            raise ParseError(
                f"JSON nested deeper than {MAX_PARSE_DEPTH} levels", code="too_deep"
            ) from None
        try:
            _check_strings(value)
        except UnicodeEncodeError:
            raise ParseError("a string contains a lone surrogate", code="invalid_unicode") from None
        return value
