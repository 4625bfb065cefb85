"""Delivery survives a killed notifier (issue 41 point 3, acceptance "chaos",
sized for the suite): 200 failure events × 2 rules, receivers on 127.0.0.1 that
verify every signature with the ``standardwebhooks`` package's own verifier,
answer 500 to about 30 % of the requests and time out on about 10 %, and two
real ``batch_notify`` processes, one of which is SIGKILLed at random moments
and restarted → every (event, rule) delivered, none lost, each with one stable
``webhook-id`` however often it was retried, and no two attempts of one
delivery in flight at once — in under 3 minutes on 2 cores (the issue's size;
``bench/notify.py`` runs 10^4 events). The ratio of requests to deliveries is
printed (``-s``) and kept in ``docs/performance.md``. PostgreSQL (separate
processes share the database; ``SKIP LOCKED`` claims)."""

from __future__ import annotations

import hashlib
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

import pytest
from django.conf import settings as django_settings

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services.notify_rules import NotificationRules, new_rule
from tests.helpers import key, launch, move
from tests.live import ROOT, database_url
from tests.notifications.receiver import Received, receiving

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
EVENTS = 200
#: The whole test's budget (the issue: under 3 minutes on 2 cores).
BUDGET_SECONDS = 170.0
TIMEOUT_SECONDS = 0.5


def flaky(number: int, request: Received) -> tuple[int, dict[str, str], float]:
    """500 to ~30 %, a timeout on ~10 % (past the notifier's timeout), else 200 —
    decided by the request's id and number, so a retry may meet another answer."""
    roll = hashlib.sha256(f"{request.webhook_id}/{number}".encode()).digest()[0] / 256
    if roll < 0.30:
        return 500, {}, 0.0
    if roll < 0.40:
        return 200, {}, TIMEOUT_SECONDS + 0.1
    return 200, {}, 0.0


def notifier_process(log: Any) -> subprocess.Popen[bytes]:
    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "project.settings",
        "DATABASE_URL": database_url(),
        "SECRET_KEY": django_settings.SECRET_KEY,  # the default sealing key derives from it
        "OXIDE_BATCH_WEBHOOK_HTTP_HOSTS": "127.0.0.1",
        "OXIDE_BATCH_NOTIFY_ATTEMPTS": "100",
        "OXIDE_BATCH_NOTIFY_BACKOFF": "1s",
        "OXIDE_BATCH_NOTIFY_BACKOFF_MAX": "2s",
        "OXIDE_BATCH_NOTIFY_TIMEOUT": f"{int(TIMEOUT_SECONDS * 1000)}ms",
        "OXIDE_BATCH_EVENTS_LEVEL": "WARNING",
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "batch_notify", "--interval", "0.2", "--json"],
        cwd=ROOT,
        env=environment,
        stdout=log,
        stderr=log,
        start_new_session=True,
    )


def failures(repo, clock, start: int, count: int) -> None:
    for number in range(start, start + count):
        move(repo, launch(repo, key(run=f"run-{number}")), S.STARTED, S.FAILED, clock=clock)


def test_every_event_reaches_every_rule_once_by_id_across_a_killed_notifier(
    repo, clock, settings
) -> None:
    settings.OXIDE_BATCH_WEBHOOK_HTTP_HOSTS = ["127.0.0.1"]
    chaos = random.Random(41)
    with receiving(behaviour=flaky) as first, receiving(behaviour=flaky) as second:
        service = NotificationRules()
        for name, receiver in (("first", first), ("second", second)):
            made = new_rule(
                name=name, jobs=["import_*"], events=["execution.failed"], webhook=receiver.url
            )
            service.add(made, by=ChangeBy("test"))
            receiver.secret = made.secret
        started = time.monotonic()
        failures(repo, clock, 0, EVENTS // 2)
        with tempfile.TemporaryFile() as log:
            processes = [notifier_process(log), notifier_process(log)]
            try:
                failures(repo, clock, EVENTS // 2, EVENTS - EVENTS // 2)  # while they run
                kills = 0
                deadline = started + BUDGET_SECONDS
                while time.monotonic() < deadline:
                    time.sleep(chaos.uniform(0.5, 3.0))
                    settled = models.NotificationDelivery.objects.exclude(state="pending").count()
                    if settled == 2 * EVENTS and kills >= 3:
                        break
                    # SIGKILL at a random moment (mid-claim, mid-attempt, mid-settle) and restart.
                    victim = processes[0]
                    os.killpg(victim.pid, signal.SIGKILL)
                    victim.wait(timeout=10)
                    kills += 1
                    processes[0] = notifier_process(log)
            finally:
                for process in processes:
                    if process.poll() is None:
                        os.killpg(process.pid, signal.SIGTERM)
                        process.wait(timeout=15)
                log.seek(0)
                output = log.read().decode(errors="replace")
        took = time.monotonic() - started
    deliveries = list(models.NotificationDelivery.objects.select_related("event", "rule"))
    assert len(deliveries) == 2 * EVENTS, output[-3000:]
    assert {d.state for d in deliveries} == {"delivered"}, output[-3000:]
    for rule_name, receiver in (("first", first), ("second", second)):
        ids_by_execution: dict[int, set[str]] = defaultdict(set)
        for request in receiver.received:
            if request.truncated:
                continue  # its notifier was SIGKILLed mid-request: never a delivery
            assert request.verified, request.headers
            ids_by_execution[request.json()["data"]["job_execution_id"]].add(request.webhook_id)
        mine = {
            d.event.job_execution_id: d.webhook_id for d in deliveries if d.rule.name == rule_name
        }
        # Each (event, rule) reached its receiver with one stable id, and was answered 2xx.
        assert {execution: {webhook_id} for execution, webhook_id in mine.items()} == dict(
            ids_by_execution
        )
        assert set(receiver.delivered()) == set(mine.values())
        assert receiver.overlaps == []  # never two attempts of one delivery at once
    attempts = sum(d.attempts for d in deliveries)
    requests = len(first.received) + len(second.received)
    truncated = sum(r.truncated for r in [*first.received, *second.received])
    print(  # the ratio the issue asks to report
        f"\n{len(deliveries)} deliveries, {attempts} attempts counted, {requests} requests "
        f"received: {requests / len(deliveries):.2f} requests per delivery; "
        f"{kills} SIGKILLs ({truncated} requests cut off by one); {took:.1f} s"
    )
    assert took < BUDGET_SECONDS
