"""Durations written the way operators write them: ``90s``, ``15m``, ``1h``, ``30d``."""

from __future__ import annotations

import re
from datetime import timedelta

_DURATION = re.compile(r"(?P<amount>[0-9]{1,9})(?P<unit>ms|s|m|h|d)")
_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}


def parse_duration(text: str) -> timedelta:
    """Parse ``<integer><unit>`` (unit ``ms``, ``s``, ``m``, ``h`` or ``d``).

    Raises ``ValueError`` naming the accepted form for anything else.
    """
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise ValueError(f"invalid duration {text!r}: expected e.g. 90s, 15m, 1h or 30d")
    return int(match["amount"]) * _UNITS[match["unit"]]
