"""``manage.py batch_watchdog`` (contract §6.5): ``--once`` recovers the executions
whose lease expired and prints what it did (a line each, or one JSON object),
``--dry-run`` changes nothing, a database server younger than a TTL holds it
off, bad flags are usage errors and an unreachable database is exit 7. The
long-running loop (SIGTERM, the start-up and reconnection hold-offs, several
watchdogs at once) runs in its own process in tests/client/test_watchdog.py."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest
from django.core.management.base import CommandError

from oxide_batch import models
from oxide_batch.domain import BatchStatus, JobExecution
from oxide_batch.domain.errors import Unavailable
from oxide_batch.management.commands import batch_watchdog
from oxide_batch.repository.notifications import ChangeBy
from oxide_batch.services.deadlines import Deadlines
from tests.commands import test_contract_commands as contract_commands
from tests.commands import test_operator_commands as operator_commands
from tests.helpers import key, move

pytestmark = pytest.mark.django_db
S = BatchStatus
system_repo = operator_commands.system_repo
run = operator_commands.run
exit_code = operator_commands.exit_code
refused = contract_commands.refused
text = contract_commands.text
TTL = timedelta(seconds=60)  # OXIDE_BATCH_LEASE_TTL's default
OWNER = b"\x09" * 16


@pytest.fixture(autouse=True)
def old_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test cluster may have started less than a TTL ago: say it is old
    (the hold-off on a young server has a test of its own)."""
    monkeypatch.setattr(batch_watchdog, "database_uptime", lambda: timedelta(days=1))


@pytest.fixture
def expired(system_repo, clock) -> JobExecution:
    """A claimed STARTED execution, silent for a TTL and a second."""
    with system_repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key("watched_job")).instance
        execution = uow.create_job_execution(instance.id)
        uow.claim_execution_owner(execution.id, execution.version, OWNER)
        uow.commit()
    started = move(system_repo, execution, S.STARTED, clock=clock)
    clock.advance(TTL + timedelta(seconds=1))
    return started


def test_once_recovers_an_expired_lease_and_says_so_in_one_json_object(expired):
    document = run("batch_watchdog", "--once")
    assert (document["ok"], document["exit_code"], document["recovered"]) == (True, 0, 1)
    (action,) = document["actions"]
    assert (action["job_execution_id"], action["outcome"]) == (expired.id, "recovered")
    decision = models.RecoveryDecision.objects.get(job_execution_id=expired.id)
    assert action["decision_id"] == decision.id
    assert decision.operator_reference.startswith("watchdog@")
    assert models.JobExecution.objects.get(pk=expired.id).status == "FAILED"
    assert run("batch_watchdog", "--once")["actions"] == []  # nothing left to do


def test_once_says_what_it_did_in_a_line_per_execution(expired):
    output = text("batch_watchdog", "--once")
    decision = models.RecoveryDecision.objects.get(job_execution_id=expired.id)
    assert f"execution {expired.id}: lease expired at " in output
    assert f"marked FAILED (decision {decision.id}, operation watchdog:{expired.id}:" in output


def test_a_dry_run_lists_and_changes_nothing(expired):
    document = run("batch_watchdog", "--once", "--dry-run")
    assert (document["would_recover"], document["recovered"]) == (1, 0)
    assert models.JobExecution.objects.get(pk=expired.id).status == "STARTED"
    assert not models.OperatorRequest.objects.exists()
    assert "would be marked FAILED (dry run)" in text("batch_watchdog", "--once", "--dry-run")


def test_a_dry_run_logs_what_it_would_recover_at_info_never_the_recovery(expired, caplog):
    """A rehearsal fires no alert: its own event, at INFO, never
    ``watchdog.recovered`` at WARNING (issue 39)."""
    with caplog.at_level(logging.DEBUG, logger="oxide_batch.events"):
        run("batch_watchdog", "--once", "--dry-run")
    lines = [(r.getMessage(), r.levelno) for r in caplog.records if r.name == "oxide_batch.events"]
    assert ("watchdog.would_recover", logging.INFO) in lines
    assert not [message for message, _ in lines if message == "watchdog.recovered"]


def test_a_young_database_server_holds_it_off(expired, monkeypatch):
    monkeypatch.setattr(batch_watchdog, "database_uptime", lambda: timedelta(seconds=20))
    document = run("batch_watchdog", "--once")
    assert (document["holding_because"], document["actions"]) == ("database_started", [])
    assert document["holding_until"] is not None
    assert models.JobExecution.objects.get(pk=expired.id).status == "STARTED"
    assert "holding until" in text("batch_watchdog", "--once")


def test_an_unreachable_database_is_exit_7(expired, monkeypatch):
    def unreachable() -> None:
        raise Unavailable()

    monkeypatch.setattr(batch_watchdog, "database_uptime", unreachable)
    code, _, document = refused("batch_watchdog", "--once")
    assert (code, document["error"]["code"]) == (7, "unavailable")


@pytest.mark.parametrize(
    "flags",
    [
        ("--interval", "0"),
        ("--interval", "soon"),
        ("--limit", "0"),
        ("--limit", "-3"),
        ("--metrics-port", "70000"),
    ],
)
def test_bad_flags_are_usage_errors(flags):
    """Refused by the parser (on a command line: argparse's exit 2), naming the flag."""
    with pytest.raises(CommandError, match=f"argument {flags[0]}"):
        text("batch_watchdog", "--once", *flags)


def test_once_raises_a_run_deadline_and_says_so(system_repo, clock):
    """Issue 41 point 4: the pass raises ``execution.overdue`` (once) and reports it."""
    Deadlines(clock=clock).set("watched_job", by=ChangeBy("test"), max_duration="1h")
    with system_repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key("watched_job")).instance
        execution = uow.create_job_execution(instance.id)
        uow.commit()
    started = move(system_repo, execution, S.STARTED, clock=clock)
    clock.advance(timedelta(hours=1, seconds=1))
    (alarm,) = run("batch_watchdog", "--once")["alarms"]
    assert (alarm["kind"], alarm["job_execution_id"]) == ("execution.overdue", started.id)
    assert alarm["event_id"] == models.NotificationEvent.objects.get(kind=alarm["kind"]).pk
    assert run("batch_watchdog", "--once")["alarms"] == []  # once
    models.DeadlineAlarm.objects.all().delete()
    models.NotificationEvent.objects.all().delete()
    output = text("batch_watchdog", "--once")
    assert f"execution {started.id} of watched_job: past its maximum duration" in output
