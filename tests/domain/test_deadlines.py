"""Run deadlines and missing runs (issue 41 points 4-5): the fields a rule
accepts, and the periods it defines (``domain/deadlines.py``) — by a local
time of day in a zone (DST by zoneinfo) or rolling. Every instant is written
out: nothing depends on the day the test runs."""

from __future__ import annotations

from datetime import UTC, datetime, time, timedelta

import pytest

from oxide_batch.domain.deadlines import (
    DeadlineInvalid,
    Period,
    deadline_rule,
    latest_deadline,
    missed_period,
    overdue_since,
)
from oxide_batch.domain.errors import DomainError

SET = datetime(2026, 3, 20, 12, 0, tzinfo=UTC)


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def berlin(every: str = "1d", by: str = "06:00", set_at: datetime = SET):
    return deadline_rule(
        job_name="nightly", set_at=set_at, expect_every=every, by=by, zone="Europe/Berlin"
    )


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({}, "deadline"),
        ({"max_duration": "0s"}, "max_duration"),
        ({"max_duration": "999ms"}, "max_duration"),
        ({"max_duration": "2 hours"}, "max_duration"),
        ({"expect_every": "3651d"}, "expect_every"),
        ({"expect_every": "25h", "by": "06:00"}, "expect_every"),
        ({"expect_every": "1d", "by": "6:00"}, "by"),
        ({"expect_every": "1d", "by": "24:00"}, "by"),
        ({"max_duration": "1h", "by": "06:00"}, "by"),
        ({"expect_every": "1d", "zone": "UTC"}, "tz"),
        ({"expect_every": "1d", "by": "06:00", "zone": "Mars/Base"}, "tz"),
        ({"expect_every": "1d", "by": "06:00", "zone": "../etc/passwd"}, "tz"),
    ],
)
def test_an_invalid_field_is_named(fields, field) -> None:
    with pytest.raises(DeadlineInvalid) as error:
        deadline_rule(job_name="nightly", set_at=SET, **fields)
    assert error.value.field == field
    assert error.value.code == "deadline_invalid"


def test_the_job_name_is_checked_as_every_job_name() -> None:
    with pytest.raises(DomainError):
        deadline_rule(job_name=" nightly", set_at=SET, max_duration="1h")


def test_the_smallest_duration_is_one_second_and_by_defaults_to_utc() -> None:
    rule = deadline_rule(
        job_name="nightly", set_at=SET, max_duration="1s", expect_every="7d", by="23:59"
    )
    assert (rule.max_duration, rule.expect_every) == (timedelta(seconds=1), timedelta(days=7))
    assert (rule.by, rule.zone) == (time(23, 59), "UTC")
    assert overdue_since(rule, SET) == SET + timedelta(seconds=1)


def test_a_daily_deadline_is_the_local_time_and_its_period_the_day_before() -> None:
    rule = berlin()  # set 2026-03-20 13:00 CET
    assert latest_deadline(rule, at(2026, 3, 21, 4, 59)) is None  # first deadline ahead
    period = latest_deadline(rule, at(2026, 3, 21, 5, 0))  # 06:00 CET = 05:00 UTC
    assert period == Period(start=at(2026, 3, 20, 5, 0), deadline=at(2026, 3, 21, 5, 0))
    assert latest_deadline(rule, at(2026, 3, 22, 4, 0)) == period  # until the next one


def test_a_spring_forward_day_is_23_hours_and_ends_at_local_six() -> None:
    rule = berlin()
    # 2026-03-29: Berlin moves from CET (+1) to CEST (+2) at 02:00 local.
    period = latest_deadline(rule, at(2026, 3, 29, 4, 30))
    assert period == Period(start=at(2026, 3, 28, 5, 0), deadline=at(2026, 3, 29, 4, 0))
    assert period.deadline - period.start == timedelta(hours=23)


def test_a_fall_back_day_is_25_hours() -> None:
    rule = berlin(set_at=at(2026, 10, 20, 12, 0))
    # 2026-10-25: CEST (+2) back to CET (+1) at 03:00 local.
    period = latest_deadline(rule, at(2026, 10, 25, 5, 0))
    assert period == Period(start=at(2026, 10, 24, 4, 0), deadline=at(2026, 10, 25, 5, 0))
    assert period.deadline - period.start == timedelta(hours=25)


def test_a_by_in_the_spring_gap_takes_the_offset_before_the_change() -> None:
    rule = berlin(by="02:30")  # 02:30 does not exist on 2026-03-29 in Berlin
    period = latest_deadline(rule, at(2026, 3, 29, 12, 0))
    assert period is not None
    assert period.deadline == at(2026, 3, 29, 1, 30)  # 02:30 at +01:00, i.e. 03:30 CEST


def test_a_weekly_deadline_counts_its_days_from_the_day_the_rule_was_set() -> None:
    rule = berlin(every="7d", set_at=at(2026, 6, 1, 3, 0))  # Monday 05:00 CEST
    period = latest_deadline(rule, at(2026, 6, 5, 0, 0))
    # Monday 2026-06-01 06:00 CEST was after the setting: the first deadline.
    assert period == Period(start=at(2026, 5, 25, 4, 0), deadline=at(2026, 6, 1, 4, 0))
    assert latest_deadline(rule, at(2026, 6, 8, 4, 0)) == Period(
        start=at(2026, 6, 1, 4, 0), deadline=at(2026, 6, 8, 4, 0)
    )


def test_a_completion_within_the_period_means_nothing_is_missing() -> None:
    rule = berlin()
    now = at(2026, 3, 21, 6, 0)
    assert missed_period(rule, now, last_completed_at=None, completed_in=True) is None
    assert missed_period(rule, now, last_completed_at=None, completed_in=False) == Period(
        start=at(2026, 3, 20, 5, 0), deadline=at(2026, 3, 21, 5, 0)
    )


def test_a_rolling_period_runs_from_the_setting_or_the_last_completion() -> None:
    rule = deadline_rule(job_name="sync", set_at=SET, expect_every="6h")
    six = timedelta(hours=6)
    assert missed_period(rule, SET + six - timedelta(seconds=1), last_completed_at=None) is None
    assert missed_period(rule, SET + six, last_completed_at=None) == Period(SET, SET + six)
    # Still nothing a period later: the next period, once.
    assert missed_period(rule, SET + 2 * six + timedelta(hours=1), last_completed_at=None) == (
        Period(SET + six, SET + 2 * six)
    )
    # A completion starts the window again; one before the setting does not.
    done = SET + timedelta(hours=5)
    assert missed_period(rule, done + six - timedelta(seconds=1), last_completed_at=done) is None
    assert missed_period(rule, done + six, last_completed_at=done) == Period(done, done + six)
    early = SET - timedelta(days=3)
    assert missed_period(rule, SET + six, last_completed_at=early) == Period(SET, SET + six)


def test_a_rule_without_expect_every_never_misses() -> None:
    rule = deadline_rule(job_name="sync", set_at=SET, max_duration="1h")
    assert missed_period(rule, SET + timedelta(days=400), last_completed_at=None) is None


def test_a_by_that_occurs_twice_is_its_first_occurrence() -> None:
    rule = berlin(by="02:30", set_at=at(2026, 10, 20, 12, 0))  # 02:30 twice on 2026-10-25
    period = latest_deadline(rule, at(2026, 10, 25, 12, 0))
    assert period is not None
    assert period.deadline == at(2026, 10, 25, 0, 30)  # 02:30 CEST, not 02:30 CET
