"""The case file's notifications: the events the execution caused and the
state of each delivery (one query:
:func:`~oxide_batch.selectors.casefile.execution_notifications`)."""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch.admin.base import link
from oxide_batch.admin.display import when_short
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


def _attempts(count: int) -> str:
    return f"{count} attempt{'s' if count != 1 else ''}"


def notifications(execution_id: int) -> SafeString:
    rows = execution_notifications(execution_id)
    shown = rows[:CASE_NOTIFICATIONS]
    cells = [
        (
            row["kind"],
            when_short(row["occurred_at"]),
            row["deliveries__rule__name"] or "—",
            _delivery(row),
            _attempts(row["deliveries__attempts"]) if row["deliveries__id"] else "—",
            (row["deliveries__last_error"] or "—")[:120],
        )
        for row in shown
    ]
    if not cells:
        return format_html("{}", "None raised.")
    listed = reverse("admin:oxide_batch_notificationdelivery_changelist")
    head = format_html_join("", '<th scope="col">{}</th>', ((h,) for h in HEADERS))
    body = format_html_join(
        "",
        "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>"
        '<td class="ob-error">{}</td></tr>',
        cells,
    )
    more = "Only the first 20 are shown. " if len(rows) > CASE_NOTIFICATIONS else ""
    return format_html(
        '<table class="ob-linked ob-notifications"><thead><tr>{}</tr></thead>'
        '<tbody>{}</tbody></table><p>{}<a href="{}?execution={}">All its deliveries</a></p>',
        head,
        body,
        more,
        listed,
        execution_id,
    )
