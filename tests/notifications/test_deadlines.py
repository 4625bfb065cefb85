"""Run deadlines and missing runs (issue 41 points 4-5), on the database with
the test clock: the watchdog's pass raises ``execution.overdue`` once per run
past its job's maximum duration and ``job.missing`` once per period without a
completion — across passes and restarts, never twice for two watchdogs — each
written to the outbox with its alarm; the events reach the rules that want
them in the Standard Webhooks shape. Every instant comes from the test clock."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from oxide_batch import models
from oxide_batch.domain import BatchStatus
from oxide_batch.domain.deadlines import DeadlineNotFound
from oxide_batch.repository import deadlines as store
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services import bootstrap
from oxide_batch.services.deadlines import Deadlines
from oxide_batch.services.notifier import Notifier
from oxide_batch.services.notify_rules import NotificationRules, new_rule
from oxide_batch.services.notify_send import slack_text
from tests.helpers import key, launch, move
from tests.notifications.receiver import receiving
from tests.services.test_watchdog import TTL, watchdog

pytestmark = pytest.mark.django_db
S = BatchStatus
BY = ChangeBy("test")


@pytest.fixture
def service(repo):
    return bootstrap.operator_service(repo, stale_after=timedelta(minutes=15), lease_ttl=TTL)


@pytest.fixture
def deadlines(clock) -> Deadlines:
    return Deadlines(clock=clock)


def events(kind: str) -> list[models.NotificationEvent]:
    return list(models.NotificationEvent.objects.filter(kind=kind).order_by("id"))


def running(repo, clock, run: str, job: str = "nightly"):
    return move(repo, launch(repo, key(job=job, run=run)), S.STARTED, clock=clock)


# -- execution.overdue -----------------------------------------------------------------------


def test_a_run_past_its_maximum_duration_is_overdue_once_across_a_restart(
    repo, clock, service, deadlines
) -> None:
    deadlines.set("nightly", by=BY, max_duration="2h")
    late = running(repo, clock, "late")
    clock.advance(timedelta(minutes=30))
    in_time = running(repo, clock, "in-time")
    clock.advance(timedelta(hours=1, minutes=30))  # late: 2h 0m 1s; in_time: 1h 30m
    first = watchdog(service).run_pass()
    assert [(a.kind, a.job_execution_id) for a in first.alarms] == [("execution.overdue", late.id)]
    (event,) = events("execution.overdue")
    assert (event.job_execution_id, event.job_instance_id) == (late.id, late.job_instance_id)
    assert (event.job_name, event.status) == ("nightly", "STARTED")
    assert event.occurred_at == late.started_at + timedelta(hours=2)
    assert event.data["max_duration_seconds"] == 7200
    # Nothing else changed: a notification, not a recovery.
    assert models.JobExecution.objects.get(pk=late.id).status == "STARTED"
    assert not models.RecoveryDecision.objects.exists()
    # The next pass, and a restarted watchdog, raise nothing again.
    clock.advance(timedelta(seconds=10))
    assert watchdog(service).run_pass().alarms == ()
    restarted = watchdog(bootstrap.operator_service(repo, lease_ttl=TTL))
    assert restarted.run_pass().alarms == ()
    assert len(events("execution.overdue")) == 1
    # The one within its limit becomes overdue when it passes it, once.
    clock.advance(timedelta(minutes=30))
    (alarm,) = watchdog(service).run_pass().alarms
    assert alarm.job_execution_id == in_time.id
    assert [e.job_execution_id for e in events("execution.overdue")] == [late.id, in_time.id]


def test_a_finished_run_or_another_jobs_run_is_never_overdue(repo, clock, service, deadlines):
    deadlines.set("nightly", by=BY, max_duration="1h")
    move(repo, running(repo, clock, "done"), S.COMPLETED, clock=clock)
    running(repo, clock, "unwatched", job="other")
    clock.advance(timedelta(hours=5))
    assert watchdog(service).run_pass().alarms == ()
    assert events("execution.overdue") == []


def test_a_dry_run_raises_nothing(repo, clock, service, deadlines) -> None:
    deadlines.set("nightly", by=BY, max_duration="1h")
    running(repo, clock, "late")
    clock.advance(timedelta(hours=2))
    assert watchdog(service, dry_run=True).run_pass().alarms == ()
    assert not models.NotificationEvent.objects.exists()


def test_two_watchdogs_raise_an_alarm_once(repo, clock, deadlines) -> None:
    """Both read the run as due before either wrote: the alarm's unique
    constraint refuses the second, and its event goes with it."""
    deadlines.set("nightly", by=BY, max_duration="1h")
    late = running(repo, clock, "late")
    clock.advance(timedelta(hours=2))
    draft = store.AlarmDraft(
        kind="execution.overdue",
        job_name="nightly",
        job_instance_id=late.job_instance_id,
        job_execution_id=late.id,
        period_start=None,
        status="STARTED",
        occurred_at=clock.now(),
        data={},
    )
    assert store.raise_alarm("default", draft, now=clock.now()) is not None
    assert store.raise_alarm("default", draft, now=clock.now()) is None
    assert len(events("execution.overdue")) == 1
    assert models.DeadlineAlarm.objects.count() == 1


# -- job.missing -----------------------------------------------------------------------------


def daily(clock, deadlines: Deadlines, job: str = "nightly") -> None:
    """``--expect-every 1d --by 06:00 --tz Europe/Berlin``, set at 12:00 UTC of the clock's day."""
    clock.set(clock.now().replace(hour=12, minute=0, second=0, microsecond=0))
    deadlines.set(job, by=BY, expect_every="1d", at="06:00", zone="Europe/Berlin")


def test_a_job_with_no_execution_at_all_is_missing_once_per_period(
    repo, clock, service, deadlines
) -> None:
    daily(clock, deadlines)  # 2026-01-01 12:00 UTC; 06:00 CET is 05:00 UTC
    clock.set(datetime(2026, 1, 2, 4, 59, tzinfo=UTC))
    assert watchdog(service).run_pass().alarms == ()  # the first deadline is ahead
    clock.set(datetime(2026, 1, 2, 5, 0, 1, tzinfo=UTC))
    (alarm,) = watchdog(service).run_pass().alarms
    assert (alarm.kind, alarm.job_name) == ("job.missing", "nightly")
    assert alarm.period_start == datetime(2026, 1, 1, 5, 0, tzinfo=UTC)
    assert alarm.deadline == datetime(2026, 1, 2, 5, 0, tzinfo=UTC)
    (event,) = events("job.missing")
    assert (event.job_execution_id, event.job_instance_id, event.status) == (None, None, "")
    assert event.occurred_at == alarm.deadline
    assert event.data["period_start"] == "2026-01-01T05:00:00.000Z"
    assert event.data["deadline"] == "2026-01-02T05:00:00.000Z"
    assert event.data["last_completed_at"] is None
    # Later passes and a restarted watchdog: still once for this period.
    for minutes in (1, 60, 600):
        clock.set(alarm.deadline + timedelta(minutes=minutes))
        assert watchdog(service).run_pass().alarms == ()
    assert watchdog(bootstrap.operator_service(repo, lease_ttl=TTL)).run_pass().alarms == ()
    # The next period without a completion: once more.
    clock.set(datetime(2026, 1, 3, 5, 0, tzinfo=UTC))
    (second,) = watchdog(service).run_pass().alarms
    assert second.period_start == alarm.deadline
    assert len(events("job.missing")) == 2


def test_a_job_that_completed_in_its_period_is_not_missing(repo, clock, service, deadlines):
    daily(clock, deadlines)
    clock.set(datetime(2026, 1, 2, 3, 0, tzinfo=UTC))
    move(repo, running(repo, clock, "2026-01-02"), S.COMPLETED, clock=clock)
    # A run that failed, or is still running, does not count.
    move(repo, running(repo, clock, "x", job="failing"), S.FAILED, clock=clock)
    clock.set(datetime(2026, 1, 2, 5, 0, 1, tzinfo=UTC))
    assert watchdog(service).run_pass().alarms == ()
    assert events("job.missing") == []


def test_a_failed_or_still_running_execution_does_not_fill_the_period(repo, clock, service):
    deadlines = Deadlines(clock=clock)
    daily(clock, deadlines)
    clock.set(datetime(2026, 1, 2, 1, 0, tzinfo=UTC))
    move(repo, running(repo, clock, "failed"), S.FAILED, clock=clock)
    running(repo, clock, "running")
    clock.set(datetime(2026, 1, 2, 5, 0, tzinfo=UTC))
    (alarm,) = watchdog(service).run_pass().alarms
    assert alarm.kind == "job.missing"


def test_the_dst_day_ends_at_local_six_an_hour_earlier_in_utc(repo, clock, service) -> None:
    """2026-03-29, Berlin springs forward: the period ends at 06:00 CEST =
    04:00 UTC (23 hours long). A run completed at 04:30 UTC — 06:30 local,
    after the deadline — does not fill it, though it would under a fixed
    UTC offset."""
    clock.set(datetime(2026, 3, 27, 12, 0, tzinfo=UTC))
    Deadlines(clock=clock).set(
        "nightly", by=BY, expect_every="1d", at="06:00", zone="Europe/Berlin"
    )
    clock.set(datetime(2026, 3, 28, 4, 58, tzinfo=UTC))  # before 06:00 CET, 03-28's deadline
    move(repo, running(repo, clock, "mar-28"), S.COMPLETED, clock=clock)
    clock.set(datetime(2026, 3, 28, 5, 0, 30, tzinfo=UTC))
    assert watchdog(service).run_pass().alarms == ()  # 03-28's period had its completion
    clock.set(datetime(2026, 3, 29, 4, 29, 58, tzinfo=UTC))
    move(repo, running(repo, clock, "mar-29"), S.COMPLETED, clock=clock)  # ends 04:30:00
    (alarm,) = watchdog(service).run_pass().alarms
    assert alarm.period_start == datetime(2026, 3, 28, 5, 0, tzinfo=UTC)
    assert alarm.deadline == datetime(2026, 3, 29, 4, 0, tzinfo=UTC)


def test_a_rolling_window_runs_from_the_setting_and_each_completion(repo, clock, service):
    deadlines = Deadlines(clock=clock)
    set_at = clock.now()
    deadlines.set("sync", by=BY, expect_every="6h")
    clock.set(set_at + timedelta(hours=5))
    done = move(repo, running(repo, clock, "a", job="sync"), S.COMPLETED, clock=clock)
    clock.set(set_at + timedelta(hours=7))
    assert watchdog(service).run_pass().alarms == ()  # completed within the first window
    clock.set(done.ended_at + timedelta(hours=6))
    (alarm,) = watchdog(service).run_pass().alarms
    assert (alarm.period_start, alarm.deadline) == (
        done.ended_at,
        done.ended_at + timedelta(hours=6),
    )
    assert events("job.missing")[0].data["last_completed_at"] is not None
    assert watchdog(service).run_pass().alarms == ()


def test_the_detection_reads_in_a_bounded_number_of_queries(repo, clock, deadlines) -> None:
    """Rules, overdue runs, last completions, completions in their periods,
    alarms already raised: five reads whatever the jobs and executions; two
    INSERTs per event raised."""
    for n in range(6):
        deadlines.set(f"job{n}", by=BY, max_duration="1h", expect_every="1d", at="06:00")
        for run in range(3):
            running(repo, clock, f"r{run}", job=f"job{n}")
    clock.advance(timedelta(days=2))

    def statements() -> int:
        with CaptureQueriesContext(connection) as captured:
            deadlines.raise_due(now=clock.now())
        return len(
            [
                q
                for q in captured.captured_queries
                if not q["sql"].startswith(("SAVEPOINT", "RELEASE", "BEGIN"))
            ]
        )

    assert statements() == 5 + 2 * (6 * 3 + 6)  # 18 overdue runs, 6 missing periods
    assert statements() == 5  # all raised: the five reads, nothing written


# -- the commands, the audit, the delivery -----------------------------------------------------


def command(*args: str) -> dict[str, Any]:
    out = io.StringIO()
    call_command("batch_deadlines", *args, "--json", stdout=out)
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


def test_set_clear_and_list_are_audited(settings) -> None:
    document = command(
        "set", "nightly", "--max-duration", "2h", "--expect-every", "1d", "--by", "06:00",
        "--tz", "Europe/Berlin", "--actor", "alice",
    )  # fmt: skip
    assert (document["max_duration_seconds"], document["expect_every_seconds"]) == (7200, 86400)
    assert (document["by"], document["tz"]) == ("06:00", "Europe/Berlin")
    assert [r["job_name"] for r in command("list")["deadlines"]] == ["nightly"]
    command("clear", "nightly", "--actor", "alice")
    assert command("list")["deadlines"] == []
    changes = list(models.JobDeadlineChange.objects.order_by("id").values_list("action", "actor"))
    assert changes == [("SET", "alice"), ("CLEAR", "alice")]
    with pytest.raises(DeadlineNotFound):
        Deadlines().clear("nightly", by=BY)


@pytest.mark.parametrize(
    "args",
    [
        ("set", "nightly"),
        ("set", "nightly", "--max-duration", "0s"),
        ("set", "nightly", "--expect-every", "12h", "--by", "06:00"),
        ("set", "nightly", "--expect-every", "1d", "--by", "06:00", "--tz", "Nowhere/Town"),
    ],
)
def test_an_invalid_deadline_is_a_usage_error(args) -> None:
    with pytest.raises(CommandError) as raised:
        call_command("batch_deadlines", *args, stdout=io.StringIO())
    assert raised.value.returncode == 2
    assert str(raised.value).startswith("deadline_invalid: ")
    assert not models.JobDeadline.objects.exists()


def test_the_events_reach_a_rule_that_wants_them(repo, clock, service, settings) -> None:
    settings.OXIDE_BATCH_WEBHOOK_HTTP_HOSTS = ["127.0.0.1"]
    settings.OXIDE_BATCH_CONSOLE_URL = "https://batch.example.com"
    deadlines = Deadlines(clock=clock)
    daily(clock, deadlines)
    deadlines.set("nightly", by=BY, max_duration="1h", expect_every="1d", at="06:00",
                  zone="Europe/Berlin")  # fmt: skip
    late = running(repo, clock, "late")
    move(repo, running(repo, clock, "done", job="other"), S.COMPLETED, clock=clock)
    clock.set(datetime(2026, 1, 2, 5, 0, tzinfo=UTC))
    with receiving() as receiver:
        made = new_rule(
            name="oncall",
            jobs=["night*"],
            events=["execution.overdue", "job.missing"],
            webhook=receiver.url,
        )
        NotificationRules().add(made, by=BY)
        receiver.secret = made.secret or ""
        assert len(watchdog(service).run_pass().alarms) == 2
        report = Notifier(clock=clock).run_pass()
    # The two deadline events delivered; the other job's completion wanted by no rule.
    assert (report.events, report.deliveries_made, report.delivered) == (3, 2, 2)
    documents = {r.json()["type"]: r.json() for r in receiver.received}
    assert all(r.verified for r in receiver.received)
    overdue = documents["execution.overdue"]["data"]
    assert (overdue["job_name"], overdue["job_execution_id"]) == ("nightly", late.id)
    assert overdue["status"] == "STARTED"
    assert overdue["url"] == (
        f"https://batch.example.com/admin/oxide_batch/jobexecution/{late.id}/change/"
    )
    missing = documents["job.missing"]
    assert missing["timestamp"] == "2026-01-02T05:00:00.000Z"
    assert missing["data"]["job_execution_id"] is None
    assert missing["data"]["deadline"] == "2026-01-02T05:00:00.000Z"
    assert "overdue" in slack_text(documents["execution.overdue"])
    assert "no completed run" in slack_text(missing)


def test_the_list_is_one_query(deadlines) -> None:
    for n in range(5):
        deadlines.set(f"job{n}", by=BY, expect_every="1d", at="06:00")
    with CaptureQueriesContext(connection) as captured:
        rules = deadlines.rules()
    assert [rule.job_name for rule in rules] == [f"job{n}" for n in range(5)]
    assert len(captured.captured_queries) == 1


@pytest.mark.parametrize("job_name", ["night\u200bly", "night\u2028ly", "\u202enightly"])
def test_an_invisible_job_name_is_refused_as_every_written_name_is(job_name) -> None:
    """Decision 201's rule holds for the command as for the console and the
    API: a job name with a format character or a line separator is refused,
    by index, and nothing is written."""
    with pytest.raises(CommandError) as raised:
        call_command(
            "batch_deadlines", "set", job_name, "--max-duration", "2h", stdout=io.StringIO()
        )
    assert raised.value.returncode == 2
    assert "name_contains_invisible" in str(raised.value)
    assert not models.JobDeadline.objects.exists()
