"""Retention of the notification tables (issue 41, decision 283): settled
deliveries, the events left with none pending, and deadline alarms no pass
needs any more — older than a cutoff, oldest first, in batches.

Nothing pending is ever deleted: a delivery only once ``delivered`` or
``dead`` (the state is re-checked by the DELETE itself, so a dead delivery
an operator sends again in the meantime stays), an event only once
dispatched and left with no delivery at all. A deadline alarm is what keeps
the watchdog from raising its event twice, so one is kept while it still
can: an ``execution.overdue`` alarm while its execution is unresolved, and
each job's newest ``job.missing`` alarm.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import transaction
from django.db.models import Exists, OuterRef, Q, QuerySet

from oxide_batch import models as tables  # noqa: TID251 (the model layer)
from oxide_batch.domain.status import UNRESOLVED_STATUSES

SETTLED = ("delivered", "dead")
OVERDUE = "execution.overdue"
MISSING = "job.missing"


def _deliveries(using: str, cutoff: datetime) -> QuerySet[tables.NotificationDelivery]:
    return tables.NotificationDelivery.objects.using(using).filter(
        state__in=SETTLED, settled_at__lt=cutoff
    )


def _events(using: str, cutoff: datetime) -> QuerySet[tables.NotificationEvent]:
    deliveries = tables.NotificationDelivery.objects.using(using).filter(event=OuterRef("pk"))
    return tables.NotificationEvent.objects.using(using).filter(
        ~Exists(deliveries), dispatched_at__isnull=False, dispatched_at__lt=cutoff
    )


def _alarms(using: str, cutoff: datetime) -> QuerySet[tables.DeadlineAlarm]:
    unresolved = tables.JobExecution.objects.using(using).filter(
        pk=OuterRef("job_execution_id"),
        status__in=[status.value for status in UNRESOLVED_STATUSES],
    )
    newer = tables.DeadlineAlarm.objects.using(using).filter(
        kind=MISSING, job_name=OuterRef("job_name"), period_start__gt=OuterRef("period_start")
    )
    return tables.DeadlineAlarm.objects.using(using).filter(
        (Q(kind=OVERDUE) & ~Exists(unresolved)) | (Q(kind=MISSING) & Exists(newer)),
        raised_at__lt=cutoff,
    )


def count_prunable(using: str, cutoff: datetime) -> dict[str, int]:
    """What :func:`prune` would delete now, by table (reads only). Events are
    counted as they stand: those whose deliveries are pruned first come after."""
    return {
        "deliveries": _deliveries(using, cutoff).count(),
        "events": _events(using, cutoff).count(),
        "alarms": _alarms(using, cutoff).count(),
    }


def _oldest(rows: QuerySet[Any], column: str, limit: int) -> QuerySet[Any]:
    return rows.order_by(column, "id").values("id")[:limit]


def prune(using: str, cutoff: datetime, *, limit: int) -> dict[str, int]:
    """One batch: at most ``limit`` rows of each table, oldest first, in one
    transaction; the rows deleted, by table (deliveries before the events
    they leave without any)."""
    with transaction.atomic(using=using):
        deliveries = _deliveries(using, cutoff)
        pruned = {
            "deliveries": deliveries.filter(id__in=_oldest(deliveries, "settled_at", limit))
            .filter(state__in=SETTLED)
            .delete()[0]
        }
        events = _events(using, cutoff)
        pruned["events"] = events.filter(id__in=_oldest(events, "dispatched_at", limit)).delete()[0]
        alarms = _alarms(using, cutoff)
        pruned["alarms"] = alarms.filter(id__in=_oldest(alarms, "raised_at", limit)).delete()[0]
    return pruned
