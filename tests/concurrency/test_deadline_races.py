"""Two watchdogs judge the same deadlines at once (issue 41 points 4-5), on
PostgreSQL with real threads and separate connections: both read every
overdue run and missing period before either writes, then both raise — the
alarm's unique constraints let one insert each event, the other's insert
waits for it, fails, and takes its event with it. Each event exists once."""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.repository import deadlines as store
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services.deadlines import Deadlines
from tests.concurrency.support import run_in_threads
from tests.helpers import key, launch, move

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus


def test_two_watchdogs_at_once_raise_each_event_once(repo, clock, monkeypatch) -> None:
    deadlines = Deadlines(clock=clock)
    clock.set(datetime(2026, 1, 1, 12, 0, tzinfo=UTC))
    for n in range(3):
        deadlines.set(f"job{n}", by=ChangeBy("test"), max_duration="1h", expect_every="1d",
                      at="06:00", zone="Europe/Berlin")  # fmt: skip
        for run in range(2):
            move(repo, launch(repo, key(job=f"job{n}", run=f"r{run}")), S.STARTED, clock=clock)
    clock.set(datetime(2026, 1, 2, 5, 0, tzinfo=UTC))
    both_read = threading.Barrier(2, timeout=20)
    waited = threading.local()
    original = store.raise_alarm

    def after_both_read(*args, **kwargs):
        if not getattr(waited, "done", False):
            waited.done = True
            both_read.wait()  # each watchdog has read all it will raise
        return original(*args, **kwargs)

    monkeypatch.setattr(store, "raise_alarm", after_both_read)
    outcomes = run_in_threads(2, lambda _: Deadlines(clock=clock).raise_due(now=clock.now()))
    assert all(outcome.ok for outcome in outcomes), [o.error for o in outcomes]
    raised = [alarm for outcome in outcomes for alarm in outcome.value]
    assert len(raised) == 3 * 2 + 3  # six overdue runs, three missing periods: once each
    overdue = models.NotificationEvent.objects.filter(kind="execution.overdue")
    assert overdue.count() == 6
    assert len(set(overdue.values_list("job_execution_id", flat=True))) == 6
    assert models.NotificationEvent.objects.filter(kind="job.missing").count() == 3
    assert models.DeadlineAlarm.objects.count() == 9
