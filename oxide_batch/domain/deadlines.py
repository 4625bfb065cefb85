"""Run deadlines and missing runs (issue 41 points 4 and 5): when a job's run
takes too long (``execution.overdue``), and when a job did not complete in its
period (``job.missing``) — even when nothing was launched.

A job's deadline rule (:class:`DeadlineRule`, one per job name) may say:

- ``max_duration``: a run of the job still active (STARTING, STARTED,
  STOPPING) longer than this since it started (its launch, when it never
  started) is overdue — once per execution;
- ``expect_every``: the job must COMPLETE once per period. The periods
  (:func:`missed_period`):

  * with ``by`` (a local time of day) in ``zone``: a deadline falls at ``by``
    local time every ``expect_every`` days (a whole number of days), on the
    days counted from the local date the rule was set; the period ending at a
    deadline begins at the deadline before it, so it is 23 or 25 hours long
    across a DST change (zoneinfo; a ``by`` in the spring gap is read with the
    offset before the change, an ambiguous one as its first occurrence);
  * without ``by``: a rolling window — the first period begins at the later
    of the rule's setting and the job's last completion, each lasts
    ``expect_every``, and a completion begins a new first period.

  A period is missed when no execution of the job COMPLETED (``ended_at``)
  within ``[start, deadline)``; ``job.missing`` is raised once per (job,
  period start). Only the latest period that has ended is judged: a watchdog
  that was down over several periods raises the latest, not each.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from oxide_batch.domain.durations import parse_duration
from oxide_batch.domain.errors import DomainError, NotFound
from oxide_batch.domain.names import NameKind, validate_new_name

MIN_DURATION = timedelta(seconds=1)
MAX_DURATION = timedelta(days=3650)
DAY = timedelta(days=1)
_BY = re.compile(r"(?P<hour>[01][0-9]|2[0-3]):(?P<minute>[0-5][0-9])")


@dataclass(eq=False)
class DeadlineInvalid(DomainError):
    """A deadline's field is not acceptable (``field`` names it)."""

    code: ClassVar[str] = "deadline_invalid"
    field: str
    reason: str

    @property
    def message(self) -> str:
        return f"{self.field}: {self.reason}"


@dataclass(eq=False)
class DeadlineNotFound(NotFound):
    code: ClassVar[str] = "deadline_not_found"
    job_name: str

    @property
    def message(self) -> str:
        return f"no deadline for job {self.job_name!r}"


@dataclass(frozen=True, slots=True)
class DeadlineRule:
    """One job's deadlines; ``set_at`` anchors the periods (a new ``set`` restarts them)."""

    job_name: str
    set_at: datetime
    max_duration: timedelta | None = None
    expect_every: timedelta | None = None
    by: time | None = None
    zone: str | None = None


@dataclass(frozen=True, slots=True)
class Period:
    """A period of a missing-run rule: ``[start, deadline)``."""

    start: datetime
    deadline: datetime


def parse_span(field: str, text: str) -> timedelta:
    """A duration as the other commands write it (``90s``, ``15m``, ``2h``,
    ``1d``), 1 s to ten years."""
    try:
        span = parse_duration(text)
    except ValueError as error:
        raise DeadlineInvalid(field=field, reason=str(error)) from None
    if not MIN_DURATION <= span <= MAX_DURATION:
        raise DeadlineInvalid(field=field, reason="1s to ten years")
    return span


def parse_by(text: str) -> time:
    match = _BY.fullmatch(text)
    if match is None:
        raise DeadlineInvalid(field="by", reason=f"expected HH:MM (00:00 to 23:59), got {text!r}")
    return time(int(match["hour"]), int(match["minute"]))


def parse_zone(text: str) -> str:
    try:
        if len(text) > 64:
            raise ValueError(text)
        ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise DeadlineInvalid(field="tz", reason=f"unknown time zone {text!r}") from None
    return text


def deadline_rule(
    *,
    job_name: str,
    set_at: datetime,
    max_duration: str | None = None,
    expect_every: str | None = None,
    by: str | None = None,
    zone: str | None = None,
) -> DeadlineRule:
    """Validate a rule's fields (``DeadlineInvalid`` names the field): at
    least one of ``max_duration`` and ``expect_every``; ``by`` only with
    ``expect_every``, which is then whole days; ``zone`` only with ``by``
    (default UTC). The job name is checked as every job name being written is
    (visible: decision 201)."""
    validate_new_name(job_name, NameKind.JOB)
    if max_duration is None and expect_every is None:
        raise DeadlineInvalid(
            field="deadline", reason="give --max-duration, --expect-every or both"
        )
    if by is None and zone is not None:
        raise DeadlineInvalid(field="tz", reason="only with --by")
    if by is not None and expect_every is None:
        raise DeadlineInvalid(field="by", reason="only with --expect-every")
    every = None if expect_every is None else parse_span("expect_every", expect_every)
    at = None if by is None else parse_by(by)
    if every is not None and at is not None and every % DAY:
        raise DeadlineInvalid(field="expect_every", reason="with --by, a whole number of days")
    return DeadlineRule(
        job_name=job_name,
        set_at=set_at,
        max_duration=None if max_duration is None else parse_span("max_duration", max_duration),
        expect_every=every,
        by=at,
        zone=None if at is None else parse_zone(zone or "UTC"),
    )


def overdue_since(rule: DeadlineRule, began_at: datetime) -> datetime | None:
    """When a run that began at ``began_at`` becomes overdue (``None``: no limit)."""
    return None if rule.max_duration is None else began_at + rule.max_duration


def _local_deadline(day: date, at: time, zone: ZoneInfo) -> datetime:
    # fold=0: a time in the spring gap takes the offset before the change (it
    # falls an hour "late" in wall time), an ambiguous one its first occurrence.
    return datetime.combine(day, at, tzinfo=zone).astimezone(UTC)


def latest_deadline(rule: DeadlineRule, now: datetime) -> Period | None:
    """The latest period (of a rule with ``by``) whose deadline is at or before
    ``now`` and after the rule was set; ``None`` if none yet."""
    if rule.expect_every is None or rule.by is None or rule.zone is None:
        return None
    zone = ZoneInfo(rule.zone)
    step = rule.expect_every.days
    anchor = rule.set_at.astimezone(zone).date()
    # The local day of ``now`` rounded down to the anchor's grid; a step back if
    # its deadline is still ahead (one more covers a DST shift at the edge).
    k = (now.astimezone(zone).date() - anchor).days // step
    for _ in range(3):
        deadline = _local_deadline(anchor + timedelta(days=k * step), rule.by, zone)
        if deadline <= now:
            break
        k -= 1
    else:  # pragma: no cover - three steps back always reach a past deadline
        return None
    if deadline <= rule.set_at:
        return None
    start = _local_deadline(anchor + timedelta(days=(k - 1) * step), rule.by, zone)
    return Period(start=start, deadline=deadline)


def rolling_period(
    rule: DeadlineRule, now: datetime, last_completed_at: datetime | None
) -> Period | None:
    """The latest ended period of a rolling rule (no ``by``): periods of
    ``expect_every`` from the later of the rule's setting and the last
    completion; ``None`` while the first has not ended."""
    assert rule.expect_every is not None
    origin = rule.set_at
    if last_completed_at is not None and last_completed_at > origin:
        origin = last_completed_at
    ended = (now - origin) // rule.expect_every
    if ended < 1:
        return None
    start = origin + (ended - 1) * rule.expect_every
    return Period(start=start, deadline=start + rule.expect_every)


def missed_period(
    rule: DeadlineRule,
    now: datetime,
    *,
    last_completed_at: datetime | None,
    completed_in: bool | None = None,
) -> Period | None:
    """The period to raise ``job.missing`` for at ``now``, if any.

    ``last_completed_at``: the job's latest completion (the rolling anchor);
    ``completed_in``: whether a completion falls within the period of
    :func:`latest_deadline` (rules with ``by``; the caller reads it)."""
    if rule.expect_every is None:
        return None
    if rule.by is None:
        return rolling_period(rule, now, last_completed_at)
    period = latest_deadline(rule, now)
    if period is None or completed_in:
        return None
    return period
