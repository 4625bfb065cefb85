"""Axis ticks: round counts from zero past the largest value, round UTC clock
times covering the whole span with a labelled tick at each end."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from oxide_batch.admin.axes import count_ticks, time_axis


@pytest.mark.parametrize(
    ("top", "ticks"),
    [
        (0, [0, 1]),
        (1, [0, 1]),
        (4, [0, 1, 2, 3, 4]),
        (12, [0, 5, 10, 15]),
        (100, [0, 20, 40, 60, 80, 100]),
        (230_123, [0, 50_000, 100_000, 150_000, 200_000, 250_000]),
    ],
)
def test_count_ticks_are_round_and_reach_the_top(top, ticks):
    assert count_ticks(top) == ticks


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=10**9))
def test_count_ticks_start_at_zero_cover_the_top_in_few_equal_steps(top):
    ticks = count_ticks(top)
    steps = {b - a for a, b in itertools.pairwise(ticks)}
    assert ticks[0] == 0
    assert ticks[-1] >= top
    assert len(steps) == 1
    assert 2 <= len(ticks) <= 6


T0 = datetime(2026, 12, 1, 12, 39, 23, tzinfo=UTC)


@pytest.mark.parametrize(
    ("span", "labels"),
    [
        (
            timedelta(seconds=20),
            ["12:39:20", "12:39:25", "12:39:30", "12:39:35", "12:39:40", "12:39:45"],
        ),
        (timedelta(minutes=7, seconds=45), ["12:38", "12:40", "12:42", "12:44", "12:46", "12:48"]),
        (timedelta(hours=5, minutes=4), ["12:00", "14:00", "16:00", "18:00"]),
        (timedelta(days=3), ["12-01", "12-02", "12-03", "12-04", "12-05"]),
    ],
)
def test_time_ticks_are_round_utc_clock_times(span, labels):
    axis = time_axis(T0, T0 + span)
    assert [axis.label(t) for t in axis.ticks] == labels


def test_time_labels_are_utc_whatever_the_zone_of_the_input():
    berlin = timezone(timedelta(hours=1))
    axis = time_axis(T0.astimezone(berlin), (T0 + timedelta(hours=5)).astimezone(berlin))
    assert axis.label(axis.ticks[0]) == "12:00"
    assert axis.dates() == "2026-12-01"


@pytest.mark.parametrize(
    ("start", "end", "dates"),
    [
        (datetime(2026, 12, 1, 23, 10), datetime(2026, 12, 2, 1, 5), "2026-12-01 to 2026-12-02"),
        (datetime(2027, 4, 30, 23, 10), datetime(2027, 5, 1, 1, 5), "2027-04-30 to 2027-05-01"),
        (datetime(2027, 12, 31, 23, 10), datetime(2028, 1, 1, 1, 5), "2027-12-31 to 2028-01-01"),
        (datetime(2028, 2, 28, 23, 10), datetime(2028, 2, 29, 1, 5), "2028-02-28 to 2028-02-29"),
    ],
    ids=["midnight", "month-end", "year-end", "leap-day"],
)
def test_an_axis_over_midnight_names_both_dates(start, end, dates):
    axis = time_axis(start.replace(tzinfo=UTC), end.replace(tzinfo=UTC))
    assert axis.dates() == dates
    assert [axis.label(t) for t in axis.ticks][:2] == ["23:00", "23:30"]


@settings(max_examples=200, deadline=None)
@given(
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)),
    st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=60)),
)
def test_time_axis_covers_the_span_with_a_tick_at_each_end(start, span):
    origin = start.replace(tzinfo=UTC)
    axis = time_axis(origin, origin + span)
    assert axis.start == axis.ticks[0] <= origin
    assert axis.end == axis.ticks[-1] >= origin + span
    assert 2 <= len(axis.ticks) <= 8
    assert 0.0 <= axis.fraction(origin) <= axis.fraction(origin + span) <= 1.0
