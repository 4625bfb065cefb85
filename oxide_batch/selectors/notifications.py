"""Reads of the notification tables (issue 41): rules as they may be shown,
the rules a notifier matches events with, and the delivery gauges."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db.models import Count, Min, Q, Sum

from oxide_batch import models  # noqa: TID251 (selectors read the models)


@dataclass(frozen=True)
class RuleView:
    """A rule as shown: never its sealed destination."""

    id: int
    name: str
    patterns: tuple[str, ...]
    kinds: tuple[str, ...]
    destination: str
    hint: str
    enabled: bool
    pending: int
    dead: int

    def document(self) -> dict[str, Any]:
        """The rule as the operator API and ``batch_notifications list --json``
        show it (one shape for both)."""
        return {
            "name": self.name,
            "jobs": list(self.patterns),
            "events": list(self.kinds),
            "destination": self.destination,
            "hint": self.hint,
            "enabled": self.enabled,
            "pending": self.pending,
            "dead": self.dead,
        }


def rules(using: str = "default") -> list[RuleView]:
    """Every rule by name, with its pending and dead deliveries (one query)."""
    rows = (
        models.NotificationRule.objects.using(using)
        .annotate(
            pending=Count("deliveries", filter=Q(deliveries__state="pending")),
            dead=Count("deliveries", filter=Q(deliveries__state="dead")),
        )
        .order_by("name")
    )
    return [
        RuleView(
            id=row.pk,
            name=row.name,
            patterns=tuple(row.job_patterns),
            kinds=tuple(row.kinds),
            destination=row.destination,
            hint=row.destination_hint,
            enabled=row.enabled,
            pending=row.pending,
            dead=row.dead,
        )
        for row in rows
    ]


@dataclass(frozen=True)
class MatchingRule:
    """What the notifier matches an event with."""

    id: int
    patterns: tuple[str, ...]
    kinds: tuple[str, ...]


def enabled_rules(using: str = "default") -> list[MatchingRule]:
    return [
        MatchingRule(id=pk, patterns=tuple(patterns), kinds=tuple(kinds))
        for pk, patterns, kinds in models.NotificationRule.objects.using(using)
        .filter(enabled=True)
        .order_by("id")
        .values_list("id", "job_patterns", "kinds")
    ]


def sealed_destination(name: str, using: str = "default") -> tuple[str, str] | None:
    """A rule's destination kind and sealed destination (for ``test``)."""
    row = (
        models.NotificationRule.objects.using(using)
        .filter(name=name)
        .values_list("destination", "destination_sealed")
        .first()
    )
    return None if row is None else (row[0], row[1])


@dataclass(frozen=True)
class DeliveryGauges:
    pending: int
    delivered: int
    dead: int
    retried: int
    undispatched: int
    oldest_pending_at: datetime | None


def delivery_gauges(using: str = "default") -> DeliveryGauges:
    """The notifier's gauges (two queries): deliveries by state, the attempts
    beyond each delivery's first, and the oldest event not yet delivered
    (undispatched, or with a pending delivery)."""
    totals = models.NotificationDelivery.objects.using(using).aggregate(
        pending=Count("id", filter=Q(state="pending")),
        delivered=Count("id", filter=Q(state="delivered")),
        dead=Count("id", filter=Q(state="dead")),
        attempts_total=Sum("attempts"),
        settled_attempted=Count("id", filter=Q(attempts__gt=0)),
        oldest_delivery=Min("event__occurred_at", filter=Q(state="pending")),
    )
    events = models.NotificationEvent.objects.using(using).aggregate(
        undispatched=Count("id", filter=Q(dispatched_at__isnull=True)),
        oldest=Min("occurred_at", filter=Q(dispatched_at__isnull=True)),
    )
    oldest: Sequence[datetime] = [
        value for value in (totals["oldest_delivery"], events["oldest"]) if value is not None
    ]
    return DeliveryGauges(
        pending=totals["pending"],
        delivered=totals["delivered"],
        dead=totals["dead"],
        retried=max(0, (totals["attempts_total"] or 0) - totals["settled_attempted"]),
        undispatched=events["undispatched"],
        oldest_pending_at=min(oldest) if oldest else None,
    )


@dataclass(frozen=True)
class DeliveryView:
    id: int
    webhook_id: str
    rule: str
    kind: str
    job_name: str
    job_execution_id: int | None
    state: str
    attempts: int
    next_attempt_at: datetime
    last_error: str


def deliveries(
    *, state: str | None = None, limit: int = 100, using: str = "default"
) -> list[DeliveryView]:
    """The newest deliveries (of ``state``), with their rule and event (one query)."""
    rows = models.NotificationDelivery.objects.using(using).select_related("rule", "event")
    if state is not None:
        rows = rows.filter(state=state)
    return [
        DeliveryView(
            id=row.pk,
            webhook_id=row.webhook_id,
            rule=row.rule.name,
            kind=row.event.kind,
            job_name=row.event.job_name,
            job_execution_id=row.event.job_execution_id,
            state=row.state,
            attempts=row.attempts,
            next_attempt_at=row.next_attempt_at,
            last_error=row.last_error,
        )
        for row in rows.order_by("-id")[:limit]
    ]
