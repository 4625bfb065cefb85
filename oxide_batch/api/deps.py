"""The clock of the API's repository and services (tests replace it:
``monkeypatch.setattr(deps, "clock", FixedClock())``), and its services, built
by :mod:`oxide_batch.services.bootstrap` on that clock. One per request: they
are cheap, and read the state limits, the stale threshold and the purge
minimum age from the settings as they are."""

from __future__ import annotations

from oxide_batch.repository.clock import Clock, SystemClock
from oxide_batch.services import bootstrap
from oxide_batch.services.operator import OperatorService
from oxide_batch.services.retention import RetentionService

clock: Clock = SystemClock()


def operator_service() -> OperatorService:
    """Stop, abandon, recover and recovery proposals (threshold: the setting
    ``OXIDE_BATCH_RECOVERY_STALE_AFTER``)."""
    return bootstrap.operator_service(bootstrap.repository(clock))


def retention_service() -> RetentionService:
    """Holds and the two-phase purge (minimum age: the setting ``OXIDE_BATCH_PURGE_MIN_AGE``)."""
    return bootstrap.retention_service(bootstrap.repository(clock))
