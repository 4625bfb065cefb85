"""The repository and services the API works with (one per request: they are
cheap, and read the state limits, the stale threshold and the purge minimum
age from the settings as they are)."""

from __future__ import annotations

from oxide_batch.repository import DjangoJobRepository
from oxide_batch.repository.clock import Clock, SystemClock
from oxide_batch.services import bootstrap
from oxide_batch.services.operator import OperatorService
from oxide_batch.services.retention import RetentionService

# Tests may replace the clock (``monkeypatch.setattr(deps, "clock", FixedClock())``).
clock: Clock = SystemClock()


def repository() -> DjangoJobRepository:
    # The adapter itself (a runtime request needs no service): one file less on
    # the hot path than asking ``bootstrap``, which builds the services on it.
    return DjangoJobRepository(clock)


def operator_service() -> OperatorService:
    """Stop, abandon, recover and recovery proposals (threshold: the setting
    ``OXIDE_BATCH_RECOVERY_STALE_AFTER``)."""
    return bootstrap.operator_service(repository())


def retention_service() -> RetentionService:
    """Holds and the two-phase purge (minimum age: the setting ``OXIDE_BATCH_PURGE_MIN_AGE``)."""
    return bootstrap.retention_service(repository())
