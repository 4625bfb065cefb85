"""Axis ticks for the dashboard's pictures: round counts for a count axis and
round UTC clock times for a time axis. Pure functions, no Django."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

# Count steps 1, 2, 5, 10, 20, 50, … — a reader adds them up without effort.
_COUNT_STEPS = [m * 10**e for e in range(0, 13) for m in (1, 2, 5)]
# Clock steps a reader recognises on a watch face or a calendar.
_TIME_STEPS = [
    1, 2, 5, 10, 15, 30,
    60, 120, 300, 600, 900, 1800,
    3600, 7200, 10800, 21600, 43200,
    86400, 172800, 604800,
]  # fmt: skip


def count_ticks(top: int, *, most: int = 5) -> list[int]:
    """``0, step, 2·step, …`` up to the first multiple of ``step`` at or above
    ``top`` (at least 1), with at most ``most`` steps."""
    top = max(top, 1)
    step = next(s for s in _COUNT_STEPS if math.ceil(top / s) <= most)
    return list(range(0, math.ceil(top / step) * step + 1, step))


@dataclass(frozen=True)
class TimeAxis:
    """A time domain widened to whole ``step`` seconds (epoch-aligned, UTC), so
    both ends carry a tick label."""

    start: datetime
    end: datetime
    step: int
    ticks: tuple[datetime, ...]

    def fraction(self, moment: datetime) -> float:
        """Where ``moment`` lies between ``start`` (0.0) and ``end`` (1.0)."""
        span = (self.end - self.start).total_seconds()
        return (moment - self.start).total_seconds() / span

    def label(self, moment: datetime) -> str:
        """``HH:MM:SS`` below a minute, ``HH:MM`` below a day, ``MM-DD`` beyond; UTC."""
        moment = moment.astimezone(UTC)
        if self.step < 60:
            return moment.strftime("%H:%M:%S")
        if self.step < 86400:
            return moment.strftime("%H:%M")
        return moment.strftime("%m-%d")

    def dates(self) -> str:
        """The UTC date (or first and last dates) the axis spans: ``2026-12-01``."""
        first = self.start.astimezone(UTC).date()
        last = (self.end - timedelta(microseconds=1)).astimezone(UTC).date()
        return first.isoformat() if first == last else f"{first.isoformat()} to {last.isoformat()}"


def time_axis(origin: datetime, finish: datetime, *, most: int = 5) -> TimeAxis:
    """An axis covering ``origin``..``finish`` in at most about ``most`` + 2 ticks."""
    low, high = origin.timestamp(), max(finish.timestamp(), origin.timestamp() + 1)
    span = high - low
    step = next((s for s in _TIME_STEPS if span / s <= most), None)
    if step is None:
        step = math.ceil(span / most / 604800) * 604800
    first, last = math.floor(low / step) * step, math.ceil(high / step) * step
    ticks = tuple(
        datetime.fromtimestamp(t, UTC) for t in range(int(first), int(last) + 1, int(step))
    )
    return TimeAxis(start=ticks[0], end=ticks[-1], step=int(step), ticks=ticks)
