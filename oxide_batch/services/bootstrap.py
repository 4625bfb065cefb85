"""Where the services are built: the one place that picks the repository
adapter (decision 169). The API, the admin and the management commands ask
here rather than calling the constructors (the demo workload, a layer below
the services, builds the adapter on its own clock); a test gives its own
repository — the Django adapter on a test clock, or the in-memory fake of
``tests/fakes/``.

Defaults not given here are read from the settings as the services are built
(``OXIDE_BATCH_RECOVERY_STALE_AFTER``, ``OXIDE_BATCH_LEASE_TTL``) or at each
call (``OXIDE_BATCH_PURGE_MIN_AGE``), so building one per request is cheap and
always current.
"""

from __future__ import annotations

from datetime import timedelta

from oxide_batch.repository import DjangoJobRepository
from oxide_batch.repository.clock import Clock
from oxide_batch.repository.port import UnitOfWorkFactory
from oxide_batch.services.audit import Actor
from oxide_batch.services.operator import OperatorService, OperatorWork
from oxide_batch.services.retention import RetentionService, RetentionWork
from oxide_batch.services.watchdog import Watchdog


def repository(clock: Clock | None = None) -> DjangoJobRepository:
    """The Django adapter (on ``clock``, else the system clock)."""
    return DjangoJobRepository(clock)


def operator_service(
    repository: UnitOfWorkFactory[OperatorWork] | None = None,
    *,
    stale_after: timedelta | None = None,
    lease_ttl: timedelta | None = None,
) -> OperatorService:
    """Stop, abandon, recover and recovery proposals (on the Django adapter
    unless ``repository`` is given)."""
    return OperatorService(
        repository or DjangoJobRepository(), stale_after=stale_after, lease_ttl=lease_ttl
    )


def retention_service(
    repository: UnitOfWorkFactory[RetentionWork] | None = None,
    *,
    min_age: timedelta | None = None,
) -> RetentionService:
    """Holds, the two-phase purge and audit pruning (on the Django adapter
    unless ``repository`` is given)."""
    return RetentionService(repository or DjangoJobRepository(), min_age=min_age)


def watchdog(
    service: OperatorService | None = None,
    *,
    actor: Actor | None = None,
    limit: int = 100,
    dry_run: bool = False,
) -> Watchdog:
    """The lease watchdog, acting through ``service`` (default:
    :func:`operator_service`)."""
    return Watchdog(service or operator_service(), actor=actor, limit=limit, dry_run=dry_run)
