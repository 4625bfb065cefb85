"""The repository the API works with (one per request: it is cheap, and reads
the state limits from the settings as they are)."""

from __future__ import annotations

from oxide_batch.repository import DjangoJobRepository, JobRepository
from oxide_batch.repository.clock import Clock, SystemClock

# Tests may replace the clock (``monkeypatch.setattr(deps, "clock", FixedClock())``).
clock: Clock = SystemClock()


def repository() -> JobRepository:
    return DjangoJobRepository(clock)
