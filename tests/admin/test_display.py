"""The console's small renderers say what a row's state means (issue 14)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from oxide_batch.admin.display import duration

START = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
NOW = START + timedelta(hours=5, minutes=2, seconds=13, microseconds=286_000)


@pytest.mark.parametrize("status", ["STARTING", "STARTED", "STOPPING"])
def test_an_active_row_without_an_end_is_running(status):
    assert duration(START, None, status, NOW) == "5h 02m 13s (running)"


def test_an_unknown_row_is_not_running_its_outcome_is_unknown():
    """UNKNOWN has no end time because its outcome is unknown (contract §2): it was
    shown as "(running)"."""
    assert duration(START, None, "UNKNOWN", NOW) == "5h 02m 13s (outcome unknown)"


@pytest.mark.parametrize("status", ["COMPLETED", "FAILED", "STOPPED", "ABANDONED"])
def test_a_finished_row_never_reads_running(status):
    assert duration(START, START + timedelta(minutes=7, seconds=45), status, NOW) == "7m 45s"
    assert "running" not in duration(START, None, status, NOW)


def test_a_row_that_never_started_has_no_duration():
    assert duration(None, None, "STARTING", NOW) == "—"
