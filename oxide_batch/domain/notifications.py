"""Notifications (issue 41): what an on-call is told, and the rules of telling it.

The outbox: every terminal transition of a job execution (FAILED, STOPPED,
COMPLETED, ABANDONED, or a recovery) is told by one event, written in the
transaction of the change (:func:`outbox_drafts` reads the facts the operation
recorded, ``domain/events.py``). Rules are matched at delivery, never here.

The payload has the Standard Webhooks shape (docs/notifications.md): ``{"type",
"timestamp", "data": {"job_name", "job_instance_id", "job_execution_id",
"status", "url", …}}`` (:func:`payload`).
"""

from __future__ import annotations

import enum
import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

from oxide_batch.domain.errors import DomainError, NotFound
from oxide_batch.domain.events import Event, ExecutionTransitioned, RecoveryApplied
from oxide_batch.domain.evidence import instant_text
from oxide_batch.domain.jobscope import in_scope
from oxide_batch.domain.status import BatchStatus


class EventKind(enum.StrEnum):
    EXECUTION_FAILED = "execution.failed"
    EXECUTION_RECOVERED = "execution.recovered"
    EXECUTION_STOPPED = "execution.stopped"
    EXECUTION_ABANDONED = "execution.abandoned"
    EXECUTION_COMPLETED = "execution.completed"
    # Raised by the watchdog's pass (``services/deadlines.py``, issue 41 points 4-5).
    EXECUTION_OVERDUE = "execution.overdue"
    JOB_MISSING = "job.missing"
    # Raised with a new lost-write marker (``repository/unit_of_work.py``) and
    # after a purge batch failed (``services/retention.py``).
    EXECUTION_LOST_WRITE = "execution.lost_write"
    PURGE_FAILED = "purge.failed"


TERMINAL_KINDS: Mapping[BatchStatus, EventKind] = {
    BatchStatus.FAILED: EventKind.EXECUTION_FAILED,
    BatchStatus.STOPPED: EventKind.EXECUTION_STOPPED,
    BatchStatus.COMPLETED: EventKind.EXECUTION_COMPLETED,
    BatchStatus.ABANDONED: EventKind.EXECUTION_ABANDONED,
}

#: The audited actor of a watchdog's recovery begins so (``services/watchdog.py``).
WATCHDOG_ACTOR_PREFIX = "watchdog@"


@dataclass(frozen=True, slots=True)
class OutboxDraft:
    """One outbox row to insert with the change it tells of."""

    kind: EventKind
    job_name: str
    job_instance_id: int
    job_execution_id: int
    status: BatchStatus
    occurred_at: datetime
    data: Mapping[str, Any]


def outbox_drafts(facts: Iterable[Event]) -> list[OutboxDraft]:
    """The events an operation's recorded facts call for: one per execution
    that reached a terminal status (FAILED, STOPPED, COMPLETED, ABANDONED) —
    ``execution.recovered`` with its decision when a recovery put it there.
    Chunk commits, heartbeats and step transitions record no such fact."""
    facts = list(facts)
    recoveries = {fact.execution.id: fact for fact in facts if isinstance(fact, RecoveryApplied)}
    drafts: list[OutboxDraft] = []
    for fact in facts:
        if not isinstance(fact, ExecutionTransitioned):
            continue
        execution = fact.execution
        kind = TERMINAL_KINDS.get(execution.status)
        if kind is None or fact.prior is execution.status:
            continue
        data: dict[str, Any] = {
            "prior_status": fact.prior.value,
            "attempt": execution.attempt,
            "version": execution.version,
            "exit_code": execution.exit_code,
            "by": fact.actor.kind,
        }
        if execution.failure is not None:
            data["failure"] = {
                "category": execution.failure.category.value,
                "failure_id": execution.failure.failure_id,
            }
        recovery = recoveries.get(execution.id)
        if recovery is not None:
            decision = recovery.decision
            kind = EventKind.EXECUTION_RECOVERED
            data["by"] = (
                "watchdog"
                if decision.operator_reference.startswith(WATCHDOG_ACTOR_PREFIX)
                else "operator"
            )
            data["decision"] = {
                "id": decision.id,
                "resulting_status": decision.resulting_status.value,
                "reason_code": decision.reason_code,
                "eligibility": decision.eligibility,
                "operator_reference": decision.operator_reference,
                "resolved_step_ids": list(decision.resolved_step_ids),
            }
        occurred = execution.ended_at or execution.updated_at
        drafts.append(
            OutboxDraft(
                kind=kind,
                job_name=execution.job_name,
                job_instance_id=execution.job_instance_id,
                job_execution_id=execution.id,
                status=execution.status,
                occurred_at=occurred,
                data=data,
            )
        )
    return drafts


def payload(
    *,
    kind: str,
    occurred_at: datetime,
    job_name: str,
    job_instance_id: int | None,
    job_execution_id: int | None,
    status: str,
    url: str,
    data: Mapping[str, Any],
) -> dict[str, Any]:
    """The Standard Webhooks document of one event (docs/notifications.md)."""
    return {
        "type": kind,
        "timestamp": instant_text(occurred_at),
        "data": {
            "job_name": job_name,
            "job_instance_id": job_instance_id,
            "job_execution_id": job_execution_id,
            "status": status,
            "url": url,
            **data,
        },
    }


def one_line(document: Mapping[str, Any]) -> str:
    """A readable one-line text of an event (the Slack format, the e-mail's subject)."""
    data = document["data"]
    if document["type"] == EventKind.JOB_MISSING:
        return (
            f"{data['job_name']}: missing — no completed run from {data.get('period_start')} "
            f"to {data.get('deadline')}"
        )
    if document["type"] == EventKind.EXECUTION_OVERDUE:
        return (
            f"{data['job_name']}: execution {data['job_execution_id']} overdue — still "
            f"{data['status']} past its maximum duration (since {data.get('overdue_since')})"
        )
    if document["type"] == EventKind.PURGE_FAILED:
        return (
            f"purge failed ({data.get('outcome')}): a batch of {data.get('candidates')} "
            "instances, nothing of it deleted"
        )
    what = str(document["type"]).removeprefix("execution.").replace("_", " ")
    text = f"{data['job_name']}: execution {data['job_execution_id']} {what}"
    if document["type"] == EventKind.EXECUTION_RECOVERED:
        text += f" by the {data.get('by', 'operator')} ({data['status']})"
    elif data.get("failure"):
        text += f" ({data['failure']['category']})"
    return text


# -- rules ---------------------------------------------------------------------------------


class Destination(enum.StrEnum):
    WEBHOOK = "webhook"
    SLACK = "slack"
    EMAIL = "email"


@dataclass(eq=False)
class NotificationRuleInvalid(DomainError):
    """A rule's field is not acceptable (``field`` names it)."""

    code: ClassVar[str] = "notification_rule_invalid"
    field: str
    reason: str

    @property
    def message(self) -> str:
        return f"{self.field}: {self.reason}"


@dataclass(eq=False)
class NotificationRuleNotFound(NotFound):
    code: ClassVar[str] = "notification_rule_not_found"
    name: str

    @property
    def message(self) -> str:
        return f"notification rule {self.name!r} not found"


@dataclass(eq=False)
class NotificationDeliveryNotDead(NotFound):
    """Only a dead delivery is delivered again."""

    code: ClassVar[str] = "notification_delivery_not_dead"
    id: int

    @property
    def message(self) -> str:
        return f"no dead notification delivery {self.id}"


def parse_kinds(kinds: Iterable[str]) -> tuple[str, ...]:
    """Known event kinds, duplicates dropped in their order (at least one)."""
    found: list[str] = []
    for kind in kinds:
        kind = kind.strip()
        if kind not in {k.value for k in EventKind}:
            raise NotificationRuleInvalid(
                field="events", reason=f"unknown kind {kind!r}; known: {', '.join(EventKind)}"
            )
        if kind not in found:
            found.append(kind)
    if not found:
        raise NotificationRuleInvalid(field="events", reason="name at least one event kind")
    return tuple(found)


def rule_matches(
    patterns: Sequence[str], kinds: Sequence[str], *, kind: str, job_name: str
) -> bool:
    """A rule wants an event when it names its kind and one pattern matches
    its job (the token's glob syntax, ``domain/jobscope.py``)."""
    return kind in kinds and in_scope(patterns, job_name)


# -- retries -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    attempts: int = 8
    backoff: timedelta = timedelta(seconds=2)
    backoff_max: timedelta = timedelta(minutes=10)
    timeout: timedelta = timedelta(seconds=10)

    def delay(
        self,
        attempt: int,
        retry_after: timedelta | None = None,
        rng: random.Random | None = None,
    ) -> timedelta:
        """The wait before attempt ``attempt + 1`` after attempt ``attempt``
        failed: the base doubled per attempt, capped, with "full jitter" over
        its upper half; a receiver's ``Retry-After`` is honoured (capped too)."""
        cap = self.backoff_max.total_seconds()
        if retry_after is not None:
            return timedelta(seconds=min(cap, max(0.0, retry_after.total_seconds())))
        ceiling = min(cap, self.backoff.total_seconds() * 2 ** max(0, attempt - 1))
        jitter = (rng or _RNG).uniform(0.5, 1.0)
        return timedelta(seconds=ceiling * jitter)


_RNG = random.SystemRandom()


def retryable_status(status: int) -> bool:
    """5xx and 429 are retried; any other answer but 2xx is final."""
    return status == 429 or 500 <= status <= 599


def parse_retry_after(value: str | None, now: datetime) -> timedelta | None:
    """``Retry-After``: delta seconds, or an HTTP date; ``None`` if absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return timedelta(seconds=int(value))
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        return None
    return max(timedelta(0), when - now)
