"""The case file's notifications: the events the execution caused and the
state of each delivery (one query:
:func:`~oxide_batch.selectors.casefile.execution_notifications`)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from oxide_batch.admin.base import link, table
from oxide_batch.admin.display import when
from oxide_batch.admin.notify.deliveries import TONES
from oxide_batch.selectors.casefile import CASE_NOTIFICATIONS, execution_notifications

HEADERS = ("event", "raised", "rule", "delivery", "attempts", "last error")


def _state(row: dict[str, Any]) -> str:
    state = str(row["deliveries__state"])
    if state == "pending" and row["deliveries__last_error"]:
        return "retrying"
    return state


def _delivery(row: dict[str, Any]) -> SafeString:
    if row["deliveries__id"] is None:
        return format_html(
            "{}", "no rule wanted it" if row["dispatched_at"] else "not dispatched yet"
        )
    state = _state(row)
    return link(
        "notificationdelivery",
        row["deliveries__id"],
        format_html('<span class="ob-badge ob-{}">{}</span>', TONES[state], state.upper()),
    )


def notifications(execution_id: int) -> SafeString:
    rows = execution_notifications(execution_id)
    shown = rows[:CASE_NOTIFICATIONS]
    cells = [
        (
            row["kind"],
            when(row["occurred_at"]),
            row["deliveries__rule__name"] or "—",
            _delivery(row),
            "—" if row["deliveries__id"] is None else row["deliveries__attempts"],
            (row["deliveries__last_error"] or "—")[:120],
        )
        for row in shown
    ]
    if not cells:
        return format_html("{}", "None raised.")
    listed = reverse("admin:oxide_batch_notificationdelivery_changelist")
    return format_html(
        '{}<p><a href="{}?execution={}">All its deliveries</a></p>',
        table(HEADERS, cells),
        listed,
        execution_id,
    )
