"""Clocks injected into the repository. Instants are UTC with millisecond precision."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


def to_millis(instant: datetime) -> datetime:
    """Truncate to whole milliseconds (what the database stores)."""
    if instant.tzinfo is None:
        raise ValueError("instants must be timezone-aware")
    instant = instant.astimezone(UTC)
    return instant.replace(microsecond=instant.microsecond // 1000 * 1000)


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...


class SystemClock:
    """The wall clock."""

    def now(self) -> datetime:
        return to_millis(datetime.now(UTC))


class FixedClock:
    """A settable clock for tests: it only moves when told to. Thread-safe."""

    def __init__(self, instant: datetime | None = None) -> None:
        self._instant = to_millis(instant or datetime(2026, 1, 1, tzinfo=UTC))
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._instant

    def set(self, instant: datetime) -> None:
        with self._lock:
            self._instant = to_millis(instant)

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._instant = to_millis(self._instant + delta)
            return self._instant
