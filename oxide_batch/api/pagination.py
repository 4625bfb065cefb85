"""Keyset (cursor) pagination: newest first by id, no COUNT (contract §4.4).

A page is one query (``id < position ORDER BY id DESC LIMIT size + 1``), so a
traversal never shows a row twice or out of order, even while rows are added
(new rows get larger ids and land before the traversal's start). ``page_size``
is 1–500 (default 50); a bad page size or cursor is 400 ``invalid_request``.
"""

from __future__ import annotations

import binascii
import re
from base64 import b64decode
from typing import Any
from urllib import parse

from rest_framework.exceptions import ValidationError
from rest_framework.pagination import Cursor, CursorPagination
from rest_framework.request import Request

from oxide_batch.api.fields import MAX_BIGINT

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 500
_POSITION = re.compile(r"[0-9]{1,19}")
_PAGE_SIZE = re.compile(r"[0-9]{1,4}")


class KeysetPagination(CursorPagination):
    ordering = "-id"
    page_size = DEFAULT_PAGE_SIZE
    page_size_query_param = "page_size"
    max_page_size = MAX_PAGE_SIZE
    cursor_query_param = "cursor"

    def get_page_size(self, request: Request) -> int:
        text = request.query_params.get(self.page_size_query_param)
        if text is None:
            return DEFAULT_PAGE_SIZE
        if _PAGE_SIZE.fullmatch(text) is None or not 1 <= int(text) <= MAX_PAGE_SIZE:
            raise ValidationError(
                {"page_size": [f"page_size must be an integer from 1 to {MAX_PAGE_SIZE}"]},
                code="invalid_page_size",
            )
        return int(text)

    def decode_cursor(self, request: Request) -> Cursor | None:
        encoded = request.query_params.get(self.cursor_query_param)
        if encoded is None:
            return None
        try:
            text = b64decode(encoded.encode("ascii"), validate=True).decode("ascii")
            tokens = parse.parse_qs(text, keep_blank_values=True, strict_parsing=True)
            if set(tokens) - {"p", "r"} or any(len(values) != 1 for values in tokens.values()):
                raise ValueError("unexpected cursor members")
            reverse = tokens.get("r", ["0"])[0]
            if reverse not in ("0", "1"):
                raise ValueError("bad direction")
            position = tokens.get("p", [None])[0]
            if position is not None and (
                _POSITION.fullmatch(position) is None or int(position) > MAX_BIGINT
            ):
                raise ValueError("bad position")
        except (ValueError, UnicodeError, binascii.Error):
            raise ValidationError(
                {"cursor": ["the cursor is not one this API issued"]}, code="invalid_cursor"
            ) from None
        # DRF compares positions as strings in its filters; the stubs say int.
        return Cursor(offset=0, reverse=reverse == "1", position=position)  # type: ignore[arg-type]

    def get_paginated_response_schema(self, schema: dict[str, Any]) -> dict[str, Any]:
        document: dict[str, Any] = super().get_paginated_response_schema(schema)
        document["required"] = ["next", "previous", "results"]
        return document


class RecordingOrderPagination(KeysetPagination):
    """The same keyset pages, oldest first (``id > position ORDER BY id``): a
    ledger read in the order it was recorded (the skip ledger)."""

    ordering = "id"
