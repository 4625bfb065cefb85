"""The one textual form of an instant the API and purge plans accept."""

from __future__ import annotations

import re

# RFC 3339 ``date-time`` with an offset (a fraction of 1–9 digits; ``Z`` or
# ``±hh:mm``). Checked before ``datetime.fromisoformat``, which is laxer: it
# takes a space or no separators, no offset, and (CPython 3.11) stops reading at
# a NUL, so "2025-12-31T22:00:00Z\x00anything" would parse.
RFC3339_INSTANT = re.compile(
    r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,9})?(Z|[+-][0-9]{2}:[0-9]{2})"
)
