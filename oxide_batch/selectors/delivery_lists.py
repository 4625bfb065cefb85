"""The deliveries list of the operator API (issue 41): a queryset the keyset
pagination pages, newest first, filtered by state, rule and execution; each
row with its rule and event in the same query."""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from oxide_batch import models  # noqa: TID251 (selectors read the models)
from oxide_batch.selectors.notifications import DeliveryView

DELIVERY_STATES = ("pending", "delivered", "dead")


def delivery_rows(
    *,
    state: str | None = None,
    rule: str | None = None,
    job_execution_id: int | None = None,
    using: str = "default",
) -> QuerySet[models.NotificationDelivery]:
    """Deliveries (of ``state``, of the rule named ``rule``, of the events of
    ``job_execution_id``), their rule and event joined: one query a page."""
    rows = models.NotificationDelivery.objects.using(using).select_related("rule", "event")
    if state is not None:
        rows = rows.filter(state=state)
    if rule is not None:
        rows = rows.filter(rule__name=rule)
    if job_execution_id is not None:
        rows = rows.filter(event__job_execution_id=job_execution_id)
    return rows


def delivery_view(row: Any) -> DeliveryView:
    return DeliveryView(
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
