"""The dashboard's bounded reads (every query indexed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, F
from django.db.models.functions import TruncDate

from oxide_batch import models  # noqa: TID251 (the model layer)

CONSOLE_WINDOW_DAYS = 14


def executions_by_day(*, now: datetime, days: int = CONSOLE_WINDOW_DAYS) -> list[dict[str, Any]]:
    """``[{day, status, n}]`` for executions created in the last ``days`` days
    (a range on the ``ob_execution_created`` index). One query."""
    start = (now - timedelta(days=days - 1)).replace(hour=0, minute=0, second=0, microsecond=0)
    rows = (
        models.JobExecution.objects.filter(created_at__gte=start)
        .annotate(day=TruncDate("created_at", tzinfo=UTC))
        .values("day", "status")
        .annotate(n=Count("id"))
        .order_by("day", "status")
    )
    return list(rows)


STEP_TIMELINE_MAX = 200

PARTITION_GRID_MAX = 1024


def step_timeline(job_execution_id: int) -> list[dict[str, Any]]:
    """The steps of one execution in creation order (bounded). One query."""
    rows = (
        models.StepExecution.objects.filter(job_execution_id=job_execution_id)
        .order_by("id")
        # The execution's status by the join: a step under a finished or UNKNOWN
        # execution is not "running" (one query still).
        .annotate(execution_status=F("job_execution__status"))
        .values(*models.STEP_TIMELINE, "execution_status")
    )
    return [dict(row) for row in rows[:STEP_TIMELINE_MAX]]


def partition_grid(step_execution_id: int) -> list[dict[str, Any]]:
    """The partitions of one step by ordinal (bounded). One query."""
    rows = (
        models.StepPartition.objects.filter(step_execution_id=step_execution_id)
        .order_by("ordinal")
        .values("id", "partition_key", "ordinal", "status", "written_count")
    )
    return [dict(row) for row in rows[:PARTITION_GRID_MAX]]


def partitioned_step_of(job_execution_id: int) -> int | None:
    """The newest step of the execution that has partitions, if any. One query."""
    return (
        models.StepPartition.objects.filter(step_execution__job_execution_id=job_execution_id)
        .order_by("-step_execution_id")
        .values_list("step_execution_id", flat=True)
        .first()
    )


def latest_partitioned_execution() -> int | None:
    """The execution of the newest partition row (the dashboard's default). One query."""
    return (
        models.StepPartition.objects.order_by("-id")
        .values_list("step_execution__job_execution_id", flat=True)
        .first()
    )
