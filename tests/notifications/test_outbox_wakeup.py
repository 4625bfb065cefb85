"""The notifier wakes on commit (issue 41; PostgreSQL): an outbox event's
INSERT notifies the channel from a trigger (migration 0029), delivered when
its transaction commits — never for one that rolls back, once however many
events it holds — and a step's transitions and chunk commits, which write no
event, notify nothing. A real ``batch_notify`` with a 30 s ``--interval``
delivers an event committed while it is idle within about a second: it was
woken, not polled."""

from __future__ import annotations

import importlib
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import pytest
from django.conf import settings as django_settings
from django.db import transaction
from django.utils import timezone

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from oxide_batch.repository import outbox_listen
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services.notify_rules import NotificationRules, new_rule
from oxide_batch.services.notify_wakeup import Wakeups
from tests.helpers import key, launch, move
from tests.live import ROOT, database_url
from tests.notifications.receiver import receiving

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
#: A notification committed on this machine reaches the listener well within this.
TOLD_WITHIN = 2.0
#: How long to wait for a notification that must not come.
QUIET = 0.5


def test_the_migration_and_the_listener_name_one_channel() -> None:
    migration = importlib.import_module("oxide_batch.migrations.0029_outbox_notify")
    assert migration.CHANNEL == outbox_listen.CHANNEL


@pytest.fixture
def listener() -> Iterator[outbox_listen.OutboxListener]:
    listening = outbox_listen.OutboxListener()
    listening.connect()
    try:
        yield listening
    finally:
        listening.close()


def event(number: int = 0) -> models.NotificationEvent:
    return models.NotificationEvent.objects.create(
        kind="execution.failed",
        job_name="nightly_import",
        job_execution_id=number,
        status="FAILED",
        occurred_at=timezone.now(),
    )


def test_a_committed_event_notifies_once_a_rolled_back_one_never(listener) -> None:
    with transaction.atomic():
        event(1)
        event(2)
        event(3)
        assert not listener.wait(QUIET)  # not before the commit
    assert listener.wait(TOLD_WITHIN)
    assert not listener.wait(QUIET)  # three events, one transaction: one notification

    class Fault(Exception):
        pass

    def written_then_rolled_back() -> None:
        with transaction.atomic():
            event(4)
            raise Fault  # a fault after the write, before the commit

    with pytest.raises(Fault):
        written_then_rolled_back()
    assert not listener.wait(QUIET)
    assert models.NotificationEvent.objects.count() == 3


def test_a_run_end_notifies_and_its_steps_and_chunks_do_not(listener, repo, clock) -> None:
    execution = move(repo, launch(repo, key(run="woken")), S.STARTED, clock=clock)
    assert not listener.wait(QUIET)  # the launch and its start write no event
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    for count in range(1, 4):
        counts = ExecutionCounts(read=10 * count, processed=10 * count, written=10 * count)
        with repo.begin() as uow:
            step = uow.commit_chunk(step.id, step.version, counts)
            uow.commit()
    with repo.begin() as uow:
        finish = LifecycleTransition(S.COMPLETED)
        uow.transition_step_execution(step.id, step.version, finish)
        uow.commit()
    assert not listener.wait(QUIET)
    move(repo, execution, S.FAILED, clock=clock)
    assert listener.wait(TOLD_WITHIN)


def test_the_wakeups_thread_wakes_the_loop_on_commit_and_on_stop() -> None:
    wakeups = Wakeups(retry=0.2)
    assert wakeups.start()
    try:
        assert wakeups.listening.wait(5)
        wakeups.wait(0)  # the wake-up every (re)connection gives
        assert not wakeups.wait(QUIET)
        started = time.monotonic()
        event()
        assert wakeups.wait(TOLD_WITHIN)
        assert time.monotonic() - started < TOLD_WITHIN
    finally:
        wakeups.stop()
    assert wakeups.wait(0)  # a stop wakes the loop


def test_an_idle_notifier_with_a_long_interval_delivers_a_committed_event_at_once(
    repo, clock, settings
) -> None:
    settings.OXIDE_BATCH_WEBHOOK_HTTP_HOSTS = ["127.0.0.1"]
    with receiving() as receiver, tempfile.TemporaryFile() as log:
        made = new_rule(
            name="oncall", jobs=["*"], events=["execution.failed"], webhook=receiver.url
        )
        NotificationRules().add(made, by=ChangeBy("test"))
        receiver.secret = made.secret
        process = subprocess.Popen(
            [sys.executable, "manage.py", "batch_notify", "--interval", "30", "--json"],
            cwd=ROOT,
            env={
                "PATH": "/usr/bin:/bin",
                "DJANGO_SETTINGS_MODULE": "project.settings",
                "DATABASE_URL": database_url(),
                "SECRET_KEY": django_settings.SECRET_KEY,
                "OXIDE_BATCH_WEBHOOK_HTTP_HOSTS": "127.0.0.1",
                "OXIDE_BATCH_EVENTS_LEVEL": "WARNING",
            },
            stdout=log,
            stderr=log,
        )
        try:
            # Started and idle: its first pass found nothing, its listener is on.
            time.sleep(3.0)
            assert process.poll() is None
            committed = time.monotonic()
            move(repo, launch(repo, key(run="told")), S.STARTED, S.FAILED, clock=clock)
            while not receiver.delivered() and time.monotonic() - committed < 15:
                time.sleep(0.02)
            took = time.monotonic() - committed
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=30)
            log.seek(0)
            output = log.read().decode(errors="replace")
    print(f"\ncommit → delivered by an idle notifier (--interval 30): {took:.2f} s")
    assert receiver.delivered(), output[-2000:]
    assert took < TOLD_WITHIN, output[-2000:]
    assert process.returncode == 0, output[-2000:]
    assert [r.verified for r in receiver.received] == [True]
