"""The executions needing an operator (contract §2.5.3, §5.3): the API's
``unresolved_for``, the console's "needs attention", the dashboard's list,
the gauge and the watchdog's candidates, all on the partial index
``ob_execution_unresolved``.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import F, Q, QuerySet

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.evidence import ExecutionView
from oxide_batch.domain.status import BatchStatus
from oxide_batch.facts import LEASE_CUTOFF, lease_cutoff, lease_silent, owner_recorded, silent_since
from oxide_batch.repository.control import execution_view_from_row
from oxide_batch.selectors.executions import views
from oxide_batch.selectors.lookups import InLiterals

UNRESOLVED_PAGE_MAX = 500


def unresolved_executions_queryset(
    *, now: datetime, inactive_for: timedelta
) -> QuerySet[models.JobExecution]:
    """Executions needing an operator (``unresolved_for``, the dashboard; contract §2.5.3, §5.3):
    UNKNOWN, or STARTING/STARTED/STOPPING with no activity (``last_activity_at``:
    runtime writes and owner observations) and no step write (the steps'
    ``last_activity_at``) since ``now - inactive_for``.

    The top-level ``status IN (…)`` equals the predicate of the partial index
    ``ob_execution_unresolved`` (keyed by ``id``, decision 170), so PostgreSQL can read
    the (small) set of unresolved rows from it instead of the whole table; its
    values are literals in the statement (:class:`InLiterals`), so a prepared
    statement's generic plan can use that index too.
    Unordered: compose further filters, then order.
    """
    return models.JobExecution.objects.filter(InLiterals(F("status"), models.UNRESOLVED)).filter(
        Q(status=BatchStatus.UNKNOWN.value) | silent_since(now - inactive_for)
    )


def needs_attention_queryset(
    *, now: datetime, stale_after: timedelta, lease_ttl: timedelta
) -> QuerySet[models.JobExecution]:
    """The executions a recovery may resolve now (the console's "needs
    attention", the dashboard's unresolved list, the gauge): UNKNOWN; claimed
    and active with its owner's lease expired (silent longer than the TTL its
    claim was granted — ``lease_ttl`` where none is recorded —, contract
    §2.5.3); unclaimed and active, silent longer than ``stale_after``. On the
    partial index ``ob_execution_unresolved``, as
    :func:`unresolved_executions_queryset`. Unordered."""
    return (
        models.JobExecution.objects.filter(InLiterals(F("status"), models.UNRESOLVED))
        .annotate(**{LEASE_CUTOFF: lease_cutoff(now, lease_ttl)})
        .filter(
            Q(status=BatchStatus.UNKNOWN.value)
            | (Q(owner_recorded()) & lease_silent())
            | (~Q(owner_recorded()) & silent_since(now - stale_after))
        )
    )


def expired_lease_candidates(
    *, now: datetime, lease_ttl: timedelta, after_id: int = 0, limit: int = 100
) -> list[int]:
    """Ids of the claimed, active executions whose owner has been silent longer
    than the TTL its claim was granted (``lease_ttl`` where none is recorded)
    by ``now`` (no runtime write, observation or step write since): the
    watchdog's candidates, ascending, after ``after_id`` (keyset).
    One query on the partial index of unresolved executions; the caller reads
    their proposals, which decide (a write may land in between)."""
    rows = (
        models.JobExecution.objects.filter(InLiterals(F("status"), models.UNRESOLVED))
        .annotate(**{LEASE_CUTOFF: lease_cutoff(now, lease_ttl)})
        .filter(owner_recorded(), lease_silent(), pk__gt=after_id)
        .exclude(status=BatchStatus.UNKNOWN.value)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    return list(rows[:limit])


def expired_worker_candidates(
    *, now: datetime, lease_ttl: timedelta, after_id: int = 0, limit: int = 100
) -> list[tuple[int, int]]:
    """``(worker step id, job execution id)`` of the claimed partition workers
    (issue 43) still STARTING/STARTED whose own lease expired by ``now``: no
    write since their granted TTL (``lease_ttl`` where none is recorded). The
    watchdog's worker candidates, ascending, after ``after_id`` (keyset); one
    query on the partial index ``ob_step_worker_live``. The recovery re-checks
    each under its lock (a write may land in between)."""
    live = [BatchStatus.STARTING.value, BatchStatus.STARTED.value]
    rows = (
        models.StepExecution.objects.filter(
            owner_token__isnull=False, status__in=live, pk__gt=after_id
        )
        .annotate(**{LEASE_CUTOFF: lease_cutoff(now, lease_ttl)})
        .filter(last_activity_at__lte=F(LEASE_CUTOFF))
        .order_by("pk")
        .values_list("pk", "job_execution_id")
    )
    return list(rows[:limit])


def unresolved_executions(
    *,
    now: datetime,
    inactive_for: timedelta,
    limit: int = 50,
    before_id: int | None = None,
    lease_ttl: timedelta | None = None,
) -> list[ExecutionView]:
    """One page of :func:`unresolved_executions_queryset` — or, with
    ``lease_ttl``, of :func:`needs_attention_queryset` (``inactive_for`` the
    stale threshold) — newest id first; the next page passes the last id as
    ``before_id`` (keyset). One query."""
    if not 1 <= limit <= UNRESOLVED_PAGE_MAX:
        raise ValueError(f"limit must be 1..{UNRESOLVED_PAGE_MAX}")
    if lease_ttl is None:
        queryset = unresolved_executions_queryset(now=now, inactive_for=inactive_for)
    else:
        queryset = needs_attention_queryset(now=now, stale_after=inactive_for, lease_ttl=lease_ttl)
    if before_id is not None:
        queryset = queryset.filter(pk__lt=before_id)
    rows = views(queryset.order_by("-id"))
    return [execution_view_from_row(row) for row in rows[:limit]]
