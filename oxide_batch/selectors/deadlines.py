"""Reads of run deadlines (issue 41 points 4-5): the rules, and what a
watchdog's pass needs to judge them — each a single query, whatever the
number of jobs and executions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from operator import or_

from django.db.models import Exists, F, Max, OuterRef, Q

from oxide_batch import models  # noqa: TID251 (selectors read the models)
from oxide_batch.domain.deadlines import DeadlineRule, Period
from oxide_batch.domain.status import BatchStatus
from oxide_batch.selectors.lookups import InLiterals

OVERDUE = "execution.overdue"
MISSING = "job.missing"


def _span(ms: int | None) -> timedelta | None:
    return None if ms is None else timedelta(milliseconds=ms)


def deadline_rules(using: str = "default") -> list[DeadlineRule]:
    """Every job's deadlines, by job name (one query)."""
    return [
        DeadlineRule(
            job_name=row.job_name,
            set_at=row.set_at,
            max_duration=_span(row.max_duration_ms),
            expect_every=_span(row.expect_every_ms),
            by=row.by_time,
            zone=row.zone or None,
        )
        for row in models.JobDeadline.objects.using(using).order_by("job_name")
    ]


@dataclass(frozen=True)
class OverdueRun:
    """An active run past its job's maximum duration, not yet raised."""

    job_execution_id: int
    job_instance_id: int
    job_name: str
    status: str
    began_at: datetime


def overdue_runs(
    rules: Iterable[DeadlineRule], *, now: datetime, limit: int, using: str = "default"
) -> list[OverdueRun]:
    """Active executions (STARTING, STARTED, STOPPING; on the partial index of
    unresolved executions) that began — started, or were launched when never
    started — more than their job's ``max_duration`` before ``now`` and have
    no ``execution.overdue`` alarm; oldest id first, at most ``limit``. One
    query."""
    limits = [rule for rule in rules if rule.max_duration is not None]
    if not limits:
        return []
    past = reduce(
        or_,
        (
            Q(job_name=rule.job_name)
            & (
                Q(started_at__lt=now - rule.max_duration)  # type: ignore[operator]
                | Q(started_at__isnull=True, created_at__lt=now - rule.max_duration)  # type: ignore[operator]
            )
            for rule in limits
        ),
    )
    raised = models.DeadlineAlarm.objects.using(using).filter(
        kind=OVERDUE, job_execution_id=OuterRef("pk")
    )
    rows = (
        models.JobExecution.objects.using(using)
        .filter(InLiterals(F("status"), models.UNRESOLVED))
        .exclude(status=BatchStatus.UNKNOWN.value)
        .filter(past)
        .filter(~Exists(raised))
        .order_by("pk")
        .values_list("pk", "job_instance_id", "job_name", "status", "started_at", "created_at")
    )
    return [
        OverdueRun(pk, instance, name, status, started or created)
        for pk, instance, name, status, started, created in rows[:limit]
    ]


def last_completions(names: Iterable[str], using: str = "default") -> dict[str, datetime]:
    """Each named job's latest COMPLETED ``ended_at`` (one query; absent: never)."""
    names = sorted(set(names))
    if not names:
        return {}
    rows = (
        models.JobExecution.objects.using(using)
        .filter(job_name__in=names, status=BatchStatus.COMPLETED.value, ended_at__isnull=False)
        .values("job_name")
        .annotate(last=Max("ended_at"))
        .values_list("job_name", "last")
    )
    return dict(rows)


def completed_within(periods: Mapping[str, Period], using: str = "default") -> set[str]:
    """The jobs with a COMPLETED execution ended within their period
    ``[start, deadline)`` (one query)."""
    if not periods:
        return set()
    within = reduce(
        or_,
        (
            Q(job_name=name, ended_at__gte=period.start, ended_at__lt=period.deadline)
            for name, period in periods.items()
        ),
    )
    rows = (
        models.JobExecution.objects.using(using)
        .filter(within, status=BatchStatus.COMPLETED.value)
        .values_list("job_name", flat=True)
        .distinct()
    )
    return set(rows)


def raised_missing(periods: Mapping[str, Period], using: str = "default") -> set[str]:
    """The jobs whose period already has its ``job.missing`` alarm (one query)."""
    if not periods:
        return set()
    matching = reduce(
        or_,
        (Q(job_name=name, period_start=period.start) for name, period in periods.items()),
    )
    rows = (
        models.DeadlineAlarm.objects.using(using)
        .filter(matching, kind=MISSING)
        .values_list("job_name", flat=True)
    )
    return set(rows)
