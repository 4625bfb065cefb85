"""A slow or dead receiver never delays the others (issue 41 point 3): one
receiver hangs past the notifier's timeout, and the other's deliveries all
complete before the hung one's first attempt has even timed out — the hung
destination holds at most ``PER_DESTINATION`` of the notifier's workers, and
the loop does not wait for a pass's attempts."""

from __future__ import annotations

import random
import time
from datetime import timedelta

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.notifications import RetryPolicy
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services.notifier import PER_DESTINATION, Notifier
from oxide_batch.services.notify_rules import NotificationRules, new_rule
from tests.helpers import key, launch, move
from tests.notifications.receiver import Received, receiving

pytestmark = pytest.mark.django_db
S = BatchStatus
TIMEOUT = 3.0
RUNS = 20


def hangs(number: int, request: Received) -> tuple[int, dict[str, str], float]:
    return 200, {}, TIMEOUT + 3.0


def test_a_hung_receiver_never_delays_another_receivers_deliveries(repo, clock, settings) -> None:
    settings.OXIDE_BATCH_WEBHOOK_HTTP_HOSTS = ["127.0.0.1"]
    policy = RetryPolicy(
        attempts=3,
        backoff=timedelta(seconds=60),
        backoff_max=timedelta(seconds=60),
        timeout=timedelta(seconds=TIMEOUT),
    )
    notifier = Notifier(clock=clock, policy=policy, rng=random.Random(5))
    with receiving(behaviour=hangs) as hung, receiving() as healthy:
        for name, receiver in (("hung", hung), ("healthy", healthy)):
            made = new_rule(
                name=name, jobs=["*"], events=["execution.failed"], webhook=receiver.url
            )
            NotificationRules().add(made, by=ChangeBy("test"))
            receiver.secret = made.secret
        for run in range(RUNS):
            move(repo, launch(repo, key(run=f"r{run}")), S.STARTED, S.FAILED, clock=clock)
        started = time.monotonic()
        try:
            # The command's loop: a pass that does not wait, then until an attempt ends.
            while len(healthy.delivered()) < RUNS and time.monotonic() - started < 4 * TIMEOUT:
                notifier.run_pass(wait_for_attempts=False)
                notifier.wait(0.05)
            took = time.monotonic() - started
            hung_requests = len(hung.received)
        finally:
            notifier.close()  # the hung attempts time out: retried later
    assert len(healthy.delivered()) == RUNS
    assert all(request.verified for request in healthy.received)
    # Every healthy delivery was done before the hung receiver's first timeout…
    assert took < TIMEOUT, f"{took:.2f} s"
    print(f"\n{RUNS} deliveries to the healthy receiver in {took:.2f} s beside a hung one")
    # …while the hung one held no more than its share of the workers.
    assert hung_requests == PER_DESTINATION
    hung_rows = models.NotificationDelivery.objects.filter(rule__name="hung")
    assert sorted(hung_rows.values_list("attempts", flat=True)) == sorted(
        [1] * PER_DESTINATION + [0] * (RUNS - PER_DESTINATION)
    )
    assert {d.last_error for d in hung_rows.filter(attempts=1)} == {"timeout"}
    assert set(hung_rows.values_list("state", flat=True)) == {"pending"}
