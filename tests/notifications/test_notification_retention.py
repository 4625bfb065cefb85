"""Retention of notifications (issue 41, decision 283): ``batch_notifications
prune --older-than AGE`` deletes delivered and dead deliveries, the events they
leave with none and the deadline alarms no watchdog pass needs — and never
anything pending: a pending delivery, an undispatched event, the alarm of an
execution still unresolved, a job's newest missing-run alarm."""

from __future__ import annotations

import io
import itertools
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.retention import AgeBoundTooSmall
from oxide_batch.repository import FixedClock
from oxide_batch.services.notify_retention import NotificationRetention
from tests.helpers import key, launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
DAY = timedelta(days=1)
SERIAL = itertools.count(1)


@pytest.fixture
def rule(clock: FixedClock) -> models.NotificationRule:
    return models.NotificationRule.objects.create(
        name="oncall",
        job_patterns=["*"],
        kinds=["execution.failed"],
        destination="webhook",
        destination_sealed="sealed",
        destination_hint="https://hooks.example.com/…",
        created_at=clock.now(),
        updated_at=clock.now(),
    )


def event(clock: FixedClock, *, dispatched: bool = True) -> models.NotificationEvent:
    return models.NotificationEvent.objects.create(
        kind="execution.failed",
        job_name="import_job",
        job_execution_id=next(SERIAL),
        status="FAILED",
        occurred_at=clock.now(),
        dispatched_at=clock.now() if dispatched else None,
    )


def delivery(clock, rule, state: str) -> models.NotificationDelivery:
    settled = state in ("delivered", "dead")
    return models.NotificationDelivery.objects.create(
        event=event(clock),
        rule=rule,
        webhook_id=f"msg_{next(SERIAL)}",
        state=state,
        attempts=1,
        next_attempt_at=clock.now(),
        created_at=clock.now(),
        settled_at=clock.now() if settled else None,
    )


def prune(clock: FixedClock, **options) -> dict[str, int]:
    return NotificationRetention(clock=clock).prune(older_than=30 * DAY, **options).counts


def test_settled_deliveries_and_their_events_go_nothing_pending_does(clock, rule) -> None:
    delivered = delivery(clock, rule, "delivered")
    dead = delivery(clock, rule, "dead")
    pending = delivery(clock, rule, "pending")  # retrying for 40 days: still owed
    undispatched = event(clock, dispatched=False)
    no_rule_wanted = event(clock)  # settled at once, no delivery
    clock.advance(40 * DAY)
    young = delivery(clock, rule, "delivered")

    assert prune(clock) == {"deliveries": 2, "events": 3, "alarms": 0}

    left = set(models.NotificationDelivery.objects.values_list("pk", flat=True))
    assert left == {pending.pk, young.pk}
    events = set(models.NotificationEvent.objects.values_list("pk", flat=True))
    assert events == {pending.event_id, undispatched.pk, young.event_id}
    assert not models.NotificationEvent.objects.filter(
        pk__in=[delivered.event_id, dead.event_id, no_rule_wanted.pk]
    ).exists()


def test_a_dead_delivery_sent_again_is_pending_and_stays(clock, rule) -> None:
    dead = delivery(clock, rule, "dead")
    clock.advance(40 * DAY)
    models.NotificationDelivery.objects.filter(pk=dead.pk).update(state="pending")
    assert prune(clock)["deliveries"] == 0
    assert models.NotificationDelivery.objects.filter(pk=dead.pk).exists()


def alarm(clock, kind: str, **subject) -> models.DeadlineAlarm:
    return models.DeadlineAlarm.objects.create(
        kind=kind, job_name="import_job", raised_at=clock.now(), **subject
    )


def test_an_alarm_is_kept_while_a_pass_could_raise_its_event_again(repo, clock) -> None:
    running = move(repo, launch(repo), S.STARTED, clock=clock)
    other = launch(repo, key(run="2026-07-30"))
    ended = move(repo, move(repo, other, S.STARTED, clock=clock), S.COMPLETED)
    still_overdue = alarm(clock, "execution.overdue", job_execution_id=running.id)
    finished = alarm(clock, "execution.overdue", job_execution_id=ended.id)
    purged = alarm(clock, "execution.overdue", job_execution_id=987654321)
    first = alarm(clock, "job.missing", period_start=clock.now() - 2 * DAY)
    newest = alarm(clock, "job.missing", period_start=clock.now() - DAY)
    clock.advance(40 * DAY)

    assert prune(clock)["alarms"] == 3

    kept = set(models.DeadlineAlarm.objects.values_list("pk", flat=True))
    assert kept == {still_overdue.pk, newest.pk}
    assert not {finished.pk, purged.pk, first.pk} & kept


def test_batches_go_on_until_nothing_is_left_and_a_dry_run_only_counts(clock, rule) -> None:
    for _ in range(5):
        delivery(clock, rule, "delivered")
    clock.advance(40 * DAY)
    counted = NotificationRetention(clock=clock).prune(older_than=30 * DAY, dry_run=True)
    assert (counted.dry_run, counted.counts["deliveries"]) == (True, 5)
    assert models.NotificationDelivery.objects.count() == 5
    result = NotificationRetention(clock=clock).prune(older_than=30 * DAY, batch_size=2)
    assert result.counts == {"deliveries": 5, "events": 5, "alarms": 0}
    assert result.batches == 4  # 2 + 2 + 1, then one that finds nothing
    assert not models.NotificationEvent.objects.exists()


def test_an_age_under_a_day_is_refused(clock) -> None:
    with pytest.raises(AgeBoundTooSmall):
        NotificationRetention(clock=clock).prune(older_than=timedelta(hours=23))


def test_the_command_prunes_and_refuses_a_young_age() -> None:
    out = io.StringIO()
    call_command("batch_notifications", "prune", "--older-than", "30d", "--json", stdout=out)
    document = json.loads(out.getvalue())
    assert document["counts"] == {"deliveries": 0, "events": 0, "alarms": 0}
    assert document["dry_run"] is False
    with pytest.raises(CommandError, match="at least 86400s"):
        call_command("batch_notifications", "prune", "--older-than", "1h")
