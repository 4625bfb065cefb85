"""Small renderers shared by the console pages: status badges that say the
status in text, times relative and absolute (UTC), durations, counts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.timesince import timesince

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


def duration(start: datetime | None, end: datetime | None, now: datetime | None = None) -> str:
    """``1h 02m 03s``; running durations end now and say so."""
    if start is None:
        return "—"
    running = end is None
    span = (end or now or timezone.now()) - start
    text = human(span)
    return f"{text} (running)" if running else text


def human(span: timedelta) -> str:
    seconds = max(int(span.total_seconds()), 0)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h {minutes:02d}m {secs:02d}s"
    if minutes:
        return f"{minutes}m {secs:02d}s"
    return f"{secs}s"


def yes_no(value: bool, yes: str, no: str) -> SafeString:
    tone = "warn" if value else "muted"
    return format_html('<span class="ob-badge ob-{}">{}</span>', tone, yes if value else no)
