"""The transactional outbox (issue 41): the events a committed change calls for,
inserted in its own transaction — so a change that rolls back leaves none, and
a committed one always has its event.

The unit of work calls :func:`write_events` once per top-level operation with
the facts it recorded (``domain/events.py``), so every write path that can end
an execution — a runtime's transition, an operator's stop or abandon, a
recovery by an operator or the watchdog — writes its event without knowing it:
one INSERT per run end, nothing for a chunk commit, a heartbeat or a step
transition (no terminal execution fact, no statement).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from oxide_batch import models as tables  # noqa: TID251 (the model layer)
from oxide_batch.domain.events import Event
from oxide_batch.domain.notifications import EventKind, outbox_drafts


def write_events(using: str, facts: Iterable[Event]) -> int:
    """Insert the events ``facts`` call for (one statement each, in the
    caller's transaction); the number inserted."""
    drafts = outbox_drafts(facts)
    for draft in drafts:
        tables.NotificationEvent.objects.using(using).create(
            kind=draft.kind.value,
            job_name=draft.job_name,
            job_instance_id=draft.job_instance_id,
            job_execution_id=draft.job_execution_id,
            status=draft.status.value,
            occurred_at=draft.occurred_at,
            data=dict(draft.data),
        )
    return len(drafts)


def write_lost_write_event(
    using: str, job_execution_id: int, *, marker: Mapping[str, Any], now: datetime
) -> int:
    """``execution.lost_write`` for the execution just marked (in the caller's
    transaction, the marker's own: a marker that rolls back leaves no event);
    the number inserted (0 when the execution is not there)."""
    row = (
        tables.JobExecution.objects.using(using)
        .filter(pk=job_execution_id)
        .values("job_name", "job_instance_id", "status", "version")
        .first()
    )
    if row is None:
        return 0
    tables.NotificationEvent.objects.using(using).create(
        kind=EventKind.EXECUTION_LOST_WRITE.value,
        job_name=row["job_name"],
        job_instance_id=row["job_instance_id"],
        job_execution_id=job_execution_id,
        status=row["status"],
        occurred_at=now,
        data={**marker, "version": row["version"], "by": "repository"},
    )
    return 1


def write_purge_failed_event(
    using: str, *, outcome: str, candidates: int, job_name: str | None, now: datetime
) -> int:
    """``purge.failed`` (in the caller's transaction, one INSERT): its id. A
    purge names no execution; ``job_name`` is the batch's job filter, if any
    (a rule's patterns match it; ``*`` matches a purge of every job)."""
    event = tables.NotificationEvent.objects.using(using).create(
        kind=EventKind.PURGE_FAILED.value,
        job_name=job_name or "",
        job_instance_id=None,
        job_execution_id=None,
        status="",
        occurred_at=now,
        data={"outcome": outcome, "candidates": candidates, "by": "purge"},
    )
    return int(event.pk)
