"""Run the tests on another day: a pytest plugin (``-p tests.wall_clock`` in
pyproject.toml) whose ``--wall-clock`` option moves this process's wall clock
for the whole session (decision 180).

``--wall-clock=+400d`` starts the session 400 days from now (``+N`` days,
``h`` hours or ``m`` minutes); ``--wall-clock=2027-12-31T23:59:30Z`` starts it
at that instant. Either way the clock then runs on (``tick=True``), so a pass
started 30 s before a month's end crosses it. Only the wall clock moves
(``time.time``, ``datetime.now``, ``date.today`` — ``time-machine``); the
monotonic clock stays true, so timed waits (``threading.Event.wait``,
``time.sleep``) behave. libfaketime breaks both here (issue 37).

What this cannot move: other processes (``manage.py`` subprocesses, gunicorn,
the PostgreSQL server's ``now()``). The shifted passes of ``scripts/test``
therefore run the in-process suites on SQLite; a test that compares its own
clock with another process's is marked ``wall_clock`` and skipped there.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
import time_machine

OPTION = "--wall-clock"
_SHIFT = re.compile(r"^\+(\d+)([dhm])$")
_UNITS = {"d": "days", "h": "hours", "m": "minutes"}


def destination(value: str, now: datetime) -> datetime:
    """The instant a ``--wall-clock`` value names, from ``now`` (UTC)."""
    shift = _SHIFT.match(value)
    if shift is not None:
        return now + timedelta(**{_UNITS[shift.group(2)]: int(shift.group(1))})
    try:
        instant = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise pytest.UsageError(
            f"{OPTION}={value!r}: give +N followed by d, h or m (e.g. +400d), "
            "or an ISO 8601 instant with its offset (e.g. 2027-12-31T23:59:30Z)"
        ) from None
    if instant.tzinfo is None:
        raise pytest.UsageError(f"{OPTION}={value!r}: give the instant's offset (Z or +HH:MM)")
    return instant.astimezone(UTC)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        OPTION,
        metavar="+400d|INSTANT",
        help="run the session with the wall clock moved (decision 180): +N days (d), "
        "hours (h) or minutes (m) from now, or an ISO 8601 instant; it then ticks on",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "wall_clock: compares this process's clock with another process's (a subprocess, "
        "the PostgreSQL server): skipped when --wall-clock moves this process's alone",
    )
    value = config.getoption(OPTION)
    if not value:
        return
    start = destination(value, datetime.now(UTC))
    traveller = time_machine.travel(start, tick=True)
    traveller.start()
    config.add_cleanup(traveller.stop)


def pytest_report_header(config: pytest.Config) -> str | None:
    value = config.getoption(OPTION)
    if not value:
        return None
    return f"wall clock moved ({OPTION}={value}): the session began at {datetime.now(UTC)}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.getoption(OPTION):
        return
    skip = pytest.mark.skip(reason=f"compares clocks across processes; {OPTION} moves one")
    for item in items:
        if "wall_clock" in item.keywords:
            item.add_marker(skip)
