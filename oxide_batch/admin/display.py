"""Small renderers shared by the console pages: status badges that say the
status in text, times relative and absolute (UTC), durations, counts, failures."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

from oxide_batch.conf import batch_settings
from oxide_batch.domain.durations import format_duration
from oxide_batch.domain.failures import failure_help, failure_url

TONES = {
    "COMPLETED": "ok",
    "STARTING": "run",
    "STARTED": "run",
    "STOPPING": "warn",
    "STOPPED": "warn",
    "FAILED": "bad",
    "ABANDONED": "muted",
    "UNKNOWN": "bad",
}


def badge(status: str | None) -> SafeString:
    """The status as text inside a coloured pill (colour is never the only cue)."""
    if not status:
        return format_html("{}", "—")
    tone = TONES.get(status, "muted")
    return format_html(
        '<span class="ob-badge ob-{}" title="status {}">{}</span>', tone, status, status
    )


def when(moment: datetime | None, now: datetime | None = None) -> SafeString:
    """``3 hours ago`` with the absolute UTC instant beside it (and in a <time>)."""
    if moment is None:
        return format_html("{}", "—")
    now = now or timezone.now()
    utc = moment.astimezone(UTC)
    absolute = utc.strftime("%Y-%m-%d %H:%M:%S UTC")
    relative = f"{timesince(moment, now)} ago" if moment <= now else f"in {timesince(now, moment)}"
    return format_html(
        '<time datetime="{}" title="{}">{}</time> <small class="ob-abs">{}</small>',
        utc.isoformat(),
        absolute,
        relative,
        absolute,
    )


def when_absolute(moment: datetime, now: datetime) -> SafeString:
    """An instant read after "until" or "after": the absolute UTC value first,
    then how far it is in seconds or minutes, not :func:`when`'s whole minutes
    (``2026-01-01 12:00:45 UTC (in 45 s)``: a 60 s lease would read "in 0 minutes")."""
    utc = moment.astimezone(UTC)
    relative = (
        f"{human_short(now - moment)} ago" if moment <= now else f"in {human_short(moment - now)}"
    )
    return format_html(
        '<time datetime="{}">{}</time> <small class="ob-rel">({})</small>',
        utc.isoformat(),
        utc.strftime("%Y-%m-%d %H:%M:%S UTC"),
        relative,
    )


def when_short(moment: datetime | None, now: datetime | None = None) -> SafeString:
    """A list cell's reading of an instant: ``5 h 09 min ago`` over the
    absolute UTC minute (full instant in the tooltip and the <time>)."""
    if moment is None:
        return format_html("{}", "—")
    return format_html(
        '{}<br><small class="ob-abs">{}</small>',
        ago(moment, now),
        moment.astimezone(UTC).strftime("%m-%d %H:%M UTC"),
    )


def ago(moment: datetime, now: datetime | None = None) -> SafeString:
    """``5 h 09 min ago`` on one line, the absolute UTC instant in the tooltip."""
    now = now or timezone.now()
    utc = moment.astimezone(UTC)
    relative = f"{human_short(now - moment)} ago" if moment <= now else "in the future"
    return format_html(
        '<time datetime="{}" title="{}">{}</time>',
        utc.isoformat(),
        utc.strftime("%Y-%m-%d %H:%M:%S UTC"),
        relative,
    )


ACTIVE = frozenset({"STARTING", "STARTED", "STOPPING"})


def duration(
    start: datetime | None,
    end: datetime | None,
    status: str,
    now: datetime | None = None,
    *,
    parent_status: str | None = None,
) -> str:
    """``1h 02m 03s``. Without an end: "(running)" only for an active row whose
    execution (``parent_status``, for a step) is active too; an UNKNOWN one has
    no end because its outcome is unknown, not because it runs; a finished row
    without an end (or an active step of a finished execution) says so."""
    if start is None:
        return "—"
    if end is not None:
        return human(end - start)
    text = human((now or timezone.now()) - start)
    if status in ACTIVE and parent_status is not None and parent_status not in ACTIVE:
        status = "UNKNOWN" if parent_status == "UNKNOWN" else "ENDED"
    if status in ACTIVE:
        return f"{text} (running)"
    if status == "UNKNOWN":
        return f"{text} (outcome unknown)"
    return f"{text} (no end recorded)"


def human(span: timedelta) -> str:
    seconds = max(int(span.total_seconds()), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


# ``15 min``, ``5 h 02 min``, ``2 d 3 h``, ``40 s`` — the commands read the same.
human_short = format_duration


def latest(*moments: datetime | None) -> datetime | None:
    """The newest of the given instants (``None`` ones ignored)."""
    present = [m for m in moments if m is not None]
    return max(present) if present else None


def inactivity(
    status: str,
    last: datetime | None,
    *,
    threshold: timedelta,
    now: datetime | None = None,
    compact: bool = False,
) -> SafeString:
    """How long an active execution has been silent, against the recovery
    threshold: over it the row is eligible for recovery (contract §2.5.4). UNKNOWN is
    always eligible; a finished row is not inactive, it is done. ``compact``
    (a list cell): "stale 5 h 09 min" with the threshold in the tooltip."""
    if status == "UNKNOWN":
        return format_html('<span class="ob-badge ob-bad">{}</span>', "outcome unknown")
    if status not in ACTIVE:
        return format_html("{}", "—")
    if last is None:
        return format_html("{}", "no activity recorded")
    idle = max((now or timezone.now()) - last, timedelta(0))
    if compact and idle > threshold:
        return format_html(
            '<span class="ob-badge ob-warn" title="inactive {}, over the {} threshold: '
            'eligible for recovery">stale {}</span>',
            human_short(idle),
            human_short(threshold),
            human_short(idle),
        )
    if idle > threshold:
        return format_html(
            '<span class="ob-badge ob-warn">inactive {}</span> over the {} threshold',
            human_short(idle),
            human_short(threshold),
        )
    return format_html(
        "{} <small>(threshold {})</small>", human_short(idle), human_short(threshold)
    )


def yes_no(value: bool, yes: str, no: str) -> SafeString:
    tone = "warn" if value else "muted"
    return format_html('<span class="ob-badge ob-{}">{}</span>', tone, yes if value else no)


def failure(
    category: str | None,
    failure_id: int | None,
    *,
    execution_id: int,
    job_name: str,
    decision_id: int | None = None,
    given: bool = False,
    decided_by: str | None = None,
    place: LogPlace | None = None,
) -> SafeString:
    """A redacted failure as an operator can use it: the category, what it means
    and what is usually done, and the failure id — a link to its text when
    ``OXIDE_BATCH_FAILURE_URL_TEMPLATE`` is set (contract §5.5). Nothing else about a
    failure is stored, and the page says so.

    A failure a recovery decision wrote (``decision_id``; see
    :func:`recorded_by_decision`) was never logged by a runtime. With an id the
    server generated it is no log-search key, and the line links the decision
    that recorded it instead; with an id the operator gave (``given``: a key of
    their logs) it is searched as usual, and the decision is named beside it.
    ``decided_by``, that decision's actor, says who resolved a STALE_RECOVERED
    failure (the watchdog or an operator). ``place`` fills the template's
    other fields (decision 316: the step, the host, the failed row's times)."""
    if not category or failure_id is None:
        return format_html("{}", "—")
    help_ = failure_help(category, decided_by=decided_by if decision_id is not None else None)
    if decision_id is not None and not given:
        return format_html(
            '<div class="ob-failure"><strong>{}</strong>{}<br>failure id <code>{}</code> — '
            'recorded by <a href="{}">decision #{}</a>, not by the runtime: no log holds it; '
            "the decision says why and on what evidence.</div>",
            category,
            format_html(" — {} <em>{}</em>", help_.meaning, help_.action) if help_ else "",
            failure_id,
            reverse("admin:oxide_batch_recoverydecision_change", args=[decision_id]),
            decision_id,
        )
    url = logs_url(failure_id, execution_id=execution_id, job_name=job_name, place=place)
    reference = (
        format_html(
            '<a href="{}" rel="noopener" class="ob-logs">Open the logs</a> '
            "(failure {}, in your log search)",
            url,
            failure_id,
        )
        if url
        else format_html(
            "failure id <code>{}</code> — search your logs for it "
            "(set OXIDE_BATCH_FAILURE_URL_TEMPLATE to link it)",
            failure_id,
        )
    )
    where = (
        format_html(
            'the id the operator gave when <a href="{}">decision #{}</a> recorded it',
            reverse("admin:oxide_batch_recoverydecision_change", args=[decision_id]),
            decision_id,
        )
        if decision_id is not None
        else "the failure's text is where the runtime logged it (and under "
        "\u201cWhy it failed\u201d, scrubbed, when the runtime sent it and this "
        "deployment keeps it)"
    )
    return format_html(
        '<div class="ob-failure"><strong>{}</strong>{}<br>{}'
        "<br><small>Only the category and the id are stored with the execution: {}.</small></div>",
        category,
        format_html(" — {} <em>{}</em>", help_.meaning, help_.action) if help_ else "",
        reference,
        where,
    )


def recorded_by_decision(
    recovery_decision_id: int | None, failed_at: datetime | None = None, *, step: bool = False
) -> int | None:
    """The recovery decision that wrote a row's failure, if one did: every
    failure of a step a decision resolved (its unfinished steps get the
    decision's failure, contract §2.5.6), and an execution's failure when the decision
    marked it FAILED (``failed_at`` set: a resolved execution takes no runtime
    transition after, and an ABANDON decision keeps the failure it had)."""
    if recovery_decision_id is None:
        return None
    return recovery_decision_id if step or failed_at is not None else None


@dataclass(frozen=True)
class LogPlace:
    """Where and when a failure happened, for the log link's template fields."""

    step_execution_id: int | None = None
    host: str | None = None
    started_at: datetime | None = None
    ended_at: datetime | None = None


def logs_url(
    failure_id: int, *, execution_id: int, job_name: str, place: LogPlace | None = None
) -> str | None:
    """ "Open the logs": ``OXIDE_BATCH_FAILURE_URL_TEMPLATE`` filled in (``None``
    without one)."""
    where = place or LogPlace()
    return failure_url(
        batch_settings.FAILURE_URL_TEMPLATE,
        failure_id=failure_id,
        execution_id=execution_id,
        job_name=job_name,
        step_execution_id=where.step_execution_id,
        host=where.host,
        started_at=where.started_at,
        ended_at=where.ended_at,
    )


def execution_place(execution: Any) -> LogPlace:
    """An execution row's host and times (its worker's host, decision 310)."""
    return LogPlace(
        host=getattr(execution, "worker_host", None),
        started_at=execution.started_at,
        ended_at=execution.ended_at,
    )


def execution_failure(execution: Any) -> SafeString:
    """:func:`failure` of a job execution row: the case file's line and the
    page's field alike."""
    return failure(
        execution.failure_category,
        execution.failure_id,
        execution_id=execution.pk,
        job_name=execution.job_name,
        decision_id=recorded_by_decision(execution.recovery_decision_id, execution.failed_at),
        given=bool(getattr(execution, "failure_id_given", False)),
        decided_by=getattr(execution, "recovery_actor", None),
        place=execution_place(execution),
    )


def fate(row: Any, now: datetime | None = None, *, compact: bool = False) -> SafeString:
    """What became of a failure (a row that has ``failed_at``), from the
    annotations of :func:`oxide_batch.selectors.failures.failure_fate_annotations`:
    abandoned by whom and when (and why), superseded by a later attempt of its
    instance (its id and status), or still failed. A failure stays a fact;
    these are the facts that followed. Empty for a row that never failed.
    ``compact`` (a list cell): the abandon's time relative only, no reason."""
    if getattr(row, "failed_at", None) is None:
        return format_html("{}", "")
    parts: list[SafeString] = []
    if getattr(row, "abandoned_at", None) is not None:
        at = ago(row.abandoned_at, now) if compact else when(row.abandoned_at, now)
        reason = (
            ""
            if compact or not getattr(row, "abandon_reason", None)
            else format_html(" (reason {})", row.abandon_reason)
        )
        parts.append(format_html("abandoned by {} {}{}", row.abandoned_by, at, reason))
    elif row.status == "ABANDONED":
        parts.append(format_html("{}", "abandoned since"))
    if getattr(row, "later_id", None) is not None:
        parts.append(
            format_html(
                'superseded by attempt {} (<a href="{}">#{}</a>, {})',
                row.later_attempt,
                reverse("admin:oxide_batch_jobexecution_change", args=[row.later_id]),
                row.later_id,
                badge(row.later_status),
            )
        )
    if not parts:
        parts.append(format_html("{}", "still failed (no later attempt)"))
    return format_html(
        '<span class="ob-fate">{}</span>', format_html_join("; ", "{}", ((p,) for p in parts))
    )


def parameters(items: list[dict[str, Any]] | None) -> SafeString:
    """An instance's identifying parameters as an operator may see them: every
    name with its type, the value only for names listed in
    ``OXIDE_BATCH_VISIBLE_PARAMETERS`` (parameters are sensitive by default,
    contract §4.3) — the same rule as the API."""
    if not items:
        return format_html("{}", "none")
    visible = batch_settings.VISIBLE_PARAMETERS
    return format_html_join(
        ", ",
        "{}",
        (
            (
                format_html("{}=<code>{}</code>", item["name"], item["value"])
                if item["name"] in visible
                else format_html(
                    "{} <small>({}, value hidden)</small>", item["name"], item["type"]
                ),
            )
            for item in items
        ),
    )
