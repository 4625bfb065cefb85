"""The run-deadline tables' writes (issue 41 points 4-5): a job's deadlines
with their audit, and raising a deadline event — the alarm record and its
outbox event in one transaction, so a watchdog's restart never repeats it and
two watchdogs never raise it twice (the alarm's unique constraints: the
second insert fails and its transaction leaves nothing)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, time
from typing import Any

from django.db import IntegrityError, transaction

from oxide_batch import models as tables  # noqa: TID251 (the model layer)
from oxide_batch.domain.deadlines import DeadlineNotFound, DeadlineRule
from oxide_batch.repository.notifications import ChangeBy


def _ms(span: Any) -> int | None:
    return None if span is None else int(span.total_seconds() * 1000)


def rule_details(rule: DeadlineRule) -> dict[str, Any]:
    """What the audit and a listing show of a rule."""
    return {
        "max_duration_seconds": None
        if rule.max_duration is None
        else rule.max_duration.total_seconds(),
        "expect_every_seconds": None
        if rule.expect_every is None
        else rule.expect_every.total_seconds(),
        "by": None if rule.by is None else rule.by.strftime("%H:%M"),
        "tz": rule.zone,
    }


def _audit(
    using: str, job_name: str, action: str, by: ChangeBy, now: datetime, details: Mapping[str, Any]
) -> None:
    tables.JobDeadlineChange.objects.using(using).create(
        job_name=job_name,
        action=action,
        actor=by.actor,
        actor_user_id=by.user_id,
        details=dict(details),
        changed_at=now,
    )


def set_deadline(using: str, rule: DeadlineRule, *, by: ChangeBy) -> None:
    """Insert or replace the job's deadlines (audited ``SET``); its periods
    restart at ``rule.set_at``."""
    by_time: time | None = rule.by
    with transaction.atomic(using=using):
        tables.JobDeadline.objects.using(using).update_or_create(
            job_name=rule.job_name,
            defaults={
                "max_duration_ms": _ms(rule.max_duration),
                "expect_every_ms": _ms(rule.expect_every),
                "by_time": by_time,
                "zone": rule.zone or "",
                "set_at": rule.set_at,
            },
        )
        _audit(using, rule.job_name, "SET", by, rule.set_at, rule_details(rule))


def clear_deadline(using: str, job_name: str, *, by: ChangeBy, now: datetime) -> None:
    """Remove the job's deadlines (audited ``CLEAR``); ``DeadlineNotFound`` if none."""
    with transaction.atomic(using=using):
        deleted, _ = tables.JobDeadline.objects.using(using).filter(job_name=job_name).delete()
        if not deleted:
            raise DeadlineNotFound(job_name=job_name)
        _audit(using, job_name, "CLEAR", by, now, {})


@dataclass(frozen=True)
class AlarmDraft:
    """A deadline event to raise: its alarm's subject and its outbox row."""

    kind: str
    job_name: str
    job_instance_id: int | None
    job_execution_id: int | None
    period_start: datetime | None
    status: str
    occurred_at: datetime
    data: Mapping[str, Any]


def raise_alarm(using: str, draft: AlarmDraft, *, now: datetime) -> int | None:
    """The alarm record and its outbox event, in one transaction: the event's
    id, or ``None`` when it was raised before (by this or another watchdog)."""
    try:
        with transaction.atomic(using=using):
            event = tables.NotificationEvent.objects.using(using).create(
                kind=draft.kind,
                job_name=draft.job_name,
                job_instance_id=draft.job_instance_id,
                job_execution_id=draft.job_execution_id,
                status=draft.status,
                occurred_at=draft.occurred_at,
                data=dict(draft.data),
            )
            # The unique constraints refuse a second alarm: the event goes with it.
            tables.DeadlineAlarm.objects.using(using).create(
                kind=draft.kind,
                job_name=draft.job_name,
                job_execution_id=draft.job_execution_id,
                period_start=draft.period_start,
                raised_at=now,
                event_id=event.pk,
            )
    except IntegrityError:
        return None
    return int(event.pk)
