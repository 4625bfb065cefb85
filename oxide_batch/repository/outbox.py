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

from collections.abc import Iterable

from oxide_batch import models as tables  # noqa: TID251 (the model layer)
from oxide_batch.domain.events import Event
from oxide_batch.domain.notifications import outbox_drafts


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
