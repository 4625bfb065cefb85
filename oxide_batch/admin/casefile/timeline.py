"""The case file's timeline: the runtime's writes and the operators' and the
watchdog's acts, each with who and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.admin.base import link
from oxide_batch.admin.display import (
    ACTIVE,
    badge,
    human_short,
)
from oxide_batch.admin.eligibility import decision_reason
from oxide_batch.domain.evidence import Eligibility
from oxide_batch.domain.status import UNRESOLVED_STATUSES
from oxide_batch.selectors.casefile import TIMELINE_STEPS, CaseRecords

UNRESOLVED = frozenset(status.value for status in UNRESOLVED_STATUSES)


@dataclass(frozen=True)
class Event:
    at: datetime
    text: SafeString


def timeline(obj: Any, records: CaseRecords, now: datetime) -> SafeString:
    """What happened to the execution, oldest first, from the durable
    timestamps and the audit rows only (nothing is inferred)."""
    steps, decisions = records.steps, records.decisions
    requests, holds = records.requests, records.holds
    events = [Event(obj.created_at, format_html("execution created (attempt {})", obj.attempt))]
    if obj.started_at:
        events.append(Event(obj.started_at, format_html("{}", "execution started")))
    for s in steps:
        events.extend(_step_events(s))
    if obj.last_observed_at:
        events.append(Event(obj.last_observed_at, format_html("{}", "owner last observed")))
    events.extend(_decision_event(d) for d in decisions)
    abandon = next((r for r in requests if r.action == "ABANDON"), None)
    for r in requests:
        reason = format_html(", reason {}", r.reason_code) if r.reason_code else ""
        if r.action == "STOP":
            text = format_html(
                "{} by {}{}", link("operatorrequest", r.pk, "stop requested"), r.actor, reason
            )
        else:
            text = format_html(
                "{} by {}{}: {} → {}",
                link("operatorrequest", r.pk, "abandoned"),
                r.actor,
                reason,
                r.prior_status or "?",
                badge(r.result_status),
            )
        events.append(Event(r.requested_at, text))
    if obj.stop_requested_at and not any(r.action == "STOP" for r in requests):
        # A stop recorded without its audit row (purged, or older than the audit).
        events.append(
            Event(obj.stop_requested_at, format_html("stop requested by {}", obj.stop_requested_by))
        )
    for h in holds:
        events.append(
            Event(
                h.applied_at,
                format_html(
                    "{} on the instance by {}, reason {}",
                    link(
                        "retentionrecord",
                        h.pk,
                        "hold placed" if h.action == "HOLD" else "hold released",
                    ),
                    h.actor,
                    h.reason_code,
                ),
            )
        )
    ended = _ended_event(obj, abandon)
    if ended is not None:
        events.append(ended)
    events.sort(key=lambda e: e.at)
    items = format_html_join(
        "",
        '<li><time datetime="{}">{}</time> <span class="ob-ago">{}</span> {}</li>',
        (
            (
                e.at.isoformat(),
                e.at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC"),
                _ago(e.at, now),
                e.text,
            )
            for e in events
        ),
    )
    tail = (
        format_html("<li><strong>now</strong> — {}</li>", _now_text(obj))
        if obj.ended_at is None and obj.status in UNRESOLVED
        else format_html("{}", "")
    )
    more = (
        format_html(
            "<p><small>Only the first {} steps are on the timeline; "
            "see the steps table.</small></p>",
            TIMELINE_STEPS,
        )
        if len(steps) >= TIMELINE_STEPS
        else format_html("{}", "")
    )
    return format_html(
        '<ol class="ob-timeline" aria-labelledby="ob-timeline-title">{}{}</ol>{}', items, tail, more
    )


def _now_text(obj: Any) -> SafeString:
    """An unresolved execution's last line. A STOPPING one says which move
    made it so (STARTED → STOPPING, or STARTING → STOPPING before it started):
    the runtime's acknowledgement of the stop, whose time no column records
    (decision 197)."""
    if obj.status == "STOPPING":
        return format_html(
            "{} → {} — the runtime is stopping{} (the time of that move is not "
            "recorded); still active",
            "STARTED" if obj.started_at else "STARTING",
            badge("STOPPING"),
            " after the stop request" if obj.stop_requested_at else "",
        )
    return format_html("{}", "still active" if obj.status in ACTIVE else "no end: outcome unknown")


def _step_events(s: models.StepExecution) -> list[Event]:
    """A step's start, its last runtime write (kept when a recovery ended it:
    the decision's time is the decision's), and its end — "by decision #N" when
    a recovery ended it, so it never looks as if the step ran until then."""
    name = link("stepexecution", s.pk, s.step_name)
    events = []
    if s.started_at:
        events.append(Event(s.started_at, format_html("step {} started", name)))
    last = s.last_activity_at
    resolved = s.recovery_decision_id is not None
    if last and s.started_at and last > s.started_at and (s.ended_at is None or resolved):
        events.append(
            Event(
                last,
                format_html(
                    "step {} last runtime write (transition, chunk or checkpoint){}",
                    name,
                    "" if resolved else format_html(", {}", badge(s.status)),
                ),
            )
        )
    if s.ended_at:
        by = (
            format_html(
                " by {}",
                link(
                    "recoverydecision",
                    s.recovery_decision_id,
                    f"decision #{s.recovery_decision_id}",
                ),
            )
            if resolved
            else ""
        )
        events.append(
            Event(s.ended_at, format_html("step {} ended {}{}", name, badge(s.status), by))
        )
    return events


def _decision_event(d: models.RecoveryDecision) -> Event:
    """A recovery decision as an event of its own: who (an operator, or the
    watchdog), the disposition, the reason code, why it was allowed, the note."""
    return Event(
        d.decided_at,
        format_html(
            "{}: {} → {} by {}{}, reason {}; allowed because: {}",
            link("recoverydecision", d.pk, f"recovery decision #{d.pk}"),
            d.prior_status,
            badge(d.resulting_status),
            d.operator_reference,
            " (an operator override)"
            if d.eligibility == Eligibility.OPERATOR_OVERRIDE.value
            else "",
            d.reason_code,
            decision_reason(d.eligibility, d.override_note),
        ),
    )


def _ended_event(obj: Any, abandon: models.OperatorRequest | None) -> Event | None:
    """How the execution ended. A failure is told at its own time (``failed_at``)
    whatever followed; an abandon keeps the end time it had, so the end is told
    with the status it ended in then (the abandon is an event of its own); an
    end a recovery decided says so."""
    by = (
        format_html(
            " by {}",
            link(
                "recoverydecision",
                obj.recovery_decision_id,
                f"decision #{obj.recovery_decision_id}",
            ),
        )
        if obj.recovery_decision_id is not None
        else ""
    )
    if obj.failed_at is not None:
        return Event(obj.failed_at, format_html("execution ended {}{}", badge("FAILED"), by))
    if obj.ended_at is None:
        return None
    status = obj.status
    if abandon is not None and abandon.prior_status and obj.recovery_decision_id is None:
        status = abandon.prior_status
    return Event(obj.ended_at, format_html("execution ended {}{}", badge(status), by))


def _ago(moment: datetime, now: datetime) -> str:
    return f"({human_short(now - moment)} ago)" if moment <= now else ""
