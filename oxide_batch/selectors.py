"""Read-only queries for the console, the API and the commands.

Writes go through the repository; these only read, each with a fixed query count.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.db.models import Exists, OuterRef, Q, QuerySet

from oxide_batch import models
from oxide_batch.domain.evidence import ExecutionView
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.control import CONTROL_COLUMNS, execution_view_from_row

UNRESOLVED_PAGE_MAX = 500


def repository_is_empty() -> bool:
    """True when no job instance has been recorded yet (one indexed query)."""
    return not models.JobInstance.objects.exists()


def unresolved_executions_queryset(
    *, now: datetime, inactive_for: timedelta
) -> QuerySet[models.JobExecution]:
    """Executions needing an operator (SPEC §5 dashboard, ``unresolved_for``):
    UNKNOWN, or STARTING/STARTED/STOPPING with no activity (``last_activity_at``:
    runtime writes and owner observations) and no step write (``updated_at``)
    since ``now - inactive_for``.

    The top-level ``status IN (…)`` equals the predicate of the partial index
    ``ob_execution_unresolved`` on ``last_activity_at``, so PostgreSQL can read
    the (small) set of unresolved rows from it instead of the whole table.
    Unordered: compose further filters, then order.
    """
    cutoff = now - inactive_for
    recent_step_write = models.StepExecution.objects.filter(
        job_execution_id=OuterRef("pk"), updated_at__gte=cutoff
    )
    return models.JobExecution.objects.filter(status__in=models.UNRESOLVED).filter(
        Q(status=BatchStatus.UNKNOWN.value)
        | (Q(last_activity_at__lt=cutoff) & ~Exists(recent_step_write))
    )


def unresolved_executions(
    *,
    now: datetime,
    inactive_for: timedelta,
    limit: int = 50,
    before_id: int | None = None,
) -> list[ExecutionView]:
    """One page of :func:`unresolved_executions_queryset`, newest id first; the
    next page passes the last id as ``before_id`` (keyset). One query."""
    if not 1 <= limit <= UNRESOLVED_PAGE_MAX:
        raise ValueError(f"limit must be 1..{UNRESOLVED_PAGE_MAX}")
    queryset = unresolved_executions_queryset(now=now, inactive_for=inactive_for)
    if before_id is not None:
        queryset = queryset.filter(pk__lt=before_id)
    rows: QuerySet[Any, dict[str, Any]] = queryset.order_by("-id").values(*CONTROL_COLUMNS)
    return [execution_view_from_row(row) for row in rows[:limit]]
