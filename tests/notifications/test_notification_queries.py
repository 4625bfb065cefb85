"""The notification reads and the notifier's statements keep their budgets,
whatever the number of rules, events and deliveries."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch.domain import BatchStatus
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.selectors.notifications import (
    deliveries,
    delivery_gauges,
    enabled_rules,
    rules,
)
from oxide_batch.services.notifier import PER_DESTINATION, Notifier
from oxide_batch.services.notify_rules import NotificationRules, new_rule
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus


@pytest.fixture
def busy(repo, clock, settings):
    settings.OXIDE_BATCH_WEBHOOK_HTTP_HOSTS = ["127.0.0.1"]
    service = NotificationRules()
    for index in range(4):
        service.add(
            new_rule(
                name=f"rule{index}",
                jobs=["*"],
                events=["execution.failed"],
                webhook="http://127.0.0.1:9/nowhere",
            ),
            by=ChangeBy("test"),
        )
    for run in range(5):
        move(repo, launch(repo, key(run=f"r{run}")), S.STARTED, S.FAILED, clock=clock)


def queries(read) -> int:
    with CaptureQueriesContext(connection) as captured:
        read()
    return len(
        [q for q in captured.captured_queries if not q["sql"].startswith(("SAVEPOINT", "RELEASE"))]
    )


def test_the_reads_are_one_query_each_and_the_gauges_two(busy) -> None:
    assert queries(rules) == 1
    assert queries(enabled_rules) == 1
    assert queries(delivery_gauges) == 2


def test_the_deliveries_list_is_one_query(busy, clock) -> None:
    Notifier(clock=clock).run_pass()
    assert queries(lambda: deliveries(state="pending")) == 1


def test_a_notifiers_pass_is_a_fixed_number_of_statements_plus_one_per_outcome(busy, clock):
    """Rules (1); dispatch: the events, the deliveries' insert, the events'
    update (3); claim: the due ids, their update, the claimed rows (3); one
    update per attempt's outcome — 20 deliveries due, of which a pass attempts
    ``PER_DESTINATION`` per rule (4 rules: 16), whatever the rules and events."""
    notifier = Notifier(clock=clock)
    notifier.policy = notifier.policy.__class__(
        attempts=2, timeout=notifier.policy.timeout.__class__(milliseconds=200)
    )
    with CaptureQueriesContext(connection) as captured:
        report = notifier.run_pass()
    statements = [
        q["sql"]
        for q in captured.captured_queries
        if not q["sql"].startswith(("SAVEPOINT", "RELEASE", "BEGIN"))
    ]
    assert report.attempted == 4 * PER_DESTINATION == 16
    assert len(statements) == 7 + 16, "\n".join(statements)
