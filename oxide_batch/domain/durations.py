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


# An unresolved age (API ``unresolved_for``, ``batch_executions --unresolved-for``).
MAX_AGE = timedelta(days=10 * 365)
_SECONDS = re.compile(r"[0-9]{1,9}")
AGE_SYNTAX = "seconds (900) or a duration such as 90s, 15m, 1h, 30d"


def parse_age(text: str) -> timedelta:
    """An age, as the API's ``unresolved_for`` and the commands' ``--unresolved-for``
    both take it: bare seconds (``900``) or a duration (``90s``, ``15m``, ``1h``,
    ``30d``), 0 to ten years, nothing around it (no whitespace, no sign).

    Raises ``ValueError`` naming the accepted forms for anything else.
    """
    age: timedelta | None = None
    if _SECONDS.fullmatch(text) is not None:
        age = timedelta(seconds=int(text))
    elif text == text.strip():
        try:
            age = parse_duration(text)
        except ValueError:
            age = None
    if age is None or age > MAX_AGE:
        raise ValueError(f"invalid age {text!r}: expected {AGE_SYNTAX}, at most ten years")
    return age


def format_duration(span: timedelta) -> str:
    """A coarse reading for people (thresholds, idle times): ``40 s``, ``15 min``,
    ``5 h 03 min``, ``2 d 3 h``; a negative span reads as ``0 s``."""
    seconds = max(int(span.total_seconds()), 0)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes:02d} min" if minutes else f"{hours} h"
    if minutes:
        return f"{minutes} min"
    return f"{secs} s"


def duration_text(span: timedelta) -> str:
    """The shortest exact ``<integer><unit>`` :func:`parse_duration` reads back
    as ``span`` (``2h``, ``90s``, ``1500ms``): a stored duration shown for
    editing."""
    milliseconds = round(span.total_seconds() * 1000)
    for unit in ("d", "h", "m", "s"):
        size = round(_UNITS[unit].total_seconds() * 1000)
        if milliseconds % size == 0:
            return f"{milliseconds // size}{unit}"
    return f"{milliseconds}ms"
