"""The commands keep the API's contract (issue 15 points 3 and 4): contract §2.5.3's
activity as ``last_activity_at``, the stop request shown, every record with its
operation id, one purge report shape in which a replay never reads as new
deletions, the API's age syntax, the setting that decides an error, quiet reads,
a readable list, a quiet demo and a ``migrate`` without a "run migrate" warning."""

from __future__ import annotations

import io
import json
import logging
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.retention import format_instant
from oxide_batch.management.commands import _cli
from oxide_batch.management.commands._operator import service
from oxide_batch.observability.events import EVENT_LOGGER
from tests.commands import test_operator_commands as operator_commands
from tests.commands import test_purge_command as purge_command
from tests.helpers import launch, move

pytestmark = [pytest.mark.django_db]
S = BatchStatus
# The fixtures and helpers of the two command suites, shared.
system_repo = operator_commands.system_repo
orphan = operator_commands.orphan
world = purge_command.world
run = operator_commands.run
purge = purge_command.purge
PURGE = purge_command.PURGE


@pytest.fixture(autouse=True)
def no_terminal(monkeypatch):
    monkeypatch.setattr(_cli, "stdin_is_terminal", lambda: False)


class Events(logging.Handler):
    """The event lines a command writes (whatever its handlers are)."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture
def events():
    handler = Events()
    logger = logging.getLogger(EVENT_LOGGER)
    logger.addHandler(handler)
    yield handler
    logger.removeHandler(handler)


def refused(*args: str) -> tuple[int, str, dict[str, Any]]:
    out = io.StringIO()
    with pytest.raises(CommandError) as error:
        call_command(*args, "--json", stdout=out, stderr=io.StringIO())
    return error.value.returncode, str(error.value), json.loads(out.getvalue())


def text(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


# -- activity, stop, records ----------------------------------------------------------


def test_the_commands_show_the_activity_the_proposal_uses(orphan, system_repo, clock):
    with system_repo.begin() as uow:
        step = uow.create_step_execution(orphan.id, "load")
        uow.commit()
    clock.advance(timedelta(minutes=3))
    with system_repo.begin() as uow:
        uow.transition_step_execution(step.id, step.version, LifecycleTransition(S.STARTED))
        uow.commit()
    shown = run("batch_show", str(orphan.id))
    activity = shown["execution"]["last_activity_at"]
    assert activity == shown["proposal"]["last_activity_at"] == format_instant(clock.now())
    assert shown["execution"]["updated_at"] != activity  # a step write moved only the activity
    listed = run("batch_executions", "--instance", str(orphan.job_instance_id))
    assert listed["executions"][0]["last_activity_at"] == activity


def test_batch_stop_shows_the_stop_request_and_the_records_operation_id(orphan, clock):
    stopped = run(
        "batch_stop", str(orphan.id), "--expected-version", "1", "--operation-id", "stop-7"
    )
    assert stopped["execution"]["stop_requested"] is True
    assert stopped["execution"]["stop_requested_at"] == format_instant(clock.now())
    assert stopped["record"]["operation_id"] == "stop-7" == stopped["operation_id"]


def test_batch_recover_names_the_decisions_actor_and_operation_id(orphan):
    digest = run("batch_show", str(orphan.id))["proposal"]["evidence_digest"]
    recovered = run(
        "batch_recover", str(orphan.id), "--expected-version", "1", "--disposition",
        "ABANDON", "--reason", "WORKER_LOST", "--evidence-digest", digest,
        "--operation-id", "rec-9", "--yes", "--actor", "ops:carol",
    )  # fmt: skip
    decision = recovered["decision"]
    assert (decision["actor"], decision["operation_id"]) == ("ops:carol", "rec-9")
    assert recovered["record"]["operation_id"] == "rec-9"


# -- purge: one shape, replays apart ------------------------------------------------------


@override_settings(OXIDE_BATCH_PURGE_MIN_AGE=timedelta(0))
def test_purge_json_has_one_shape_and_a_replay_never_counts_as_new_deletions(world):
    dry = run(*purge(world, "--dry-run"))
    first = run(*purge(world, "--operation-id", "nightly", "--yes", "--batch-size", "1"))
    again = run(*purge(world, "--operation-id", "nightly", "--yes", "--batch-size", "1"))
    assert set(dry) == set(first) == set(again)
    assert (dry["outcome"], dry["dry_run"], dry["operation_id"]) == ("DRY_RUN", True, None)
    assert set(dry["counts"].values()) == {0}  # a dry run deletes nothing
    assert dry["would_delete"]["job_instances"] == 2
    assert dry["would_delete"] == dry["plan"]["counts"]
    assert (first["outcome"], first["would_delete"], first["plan"]) == ("APPLIED", None, None)
    assert first["counts"]["job_instances"] == 2
    assert set(first["replayed_counts"].values()) == {0}
    # The rerun says so, and its counts are not deletions: a wrapper adding up
    # ``counts`` over both runs counts each batch once.
    assert again["outcome"] == "REPLAYED"
    assert set(again["counts"].values()) == {0}
    assert again["replayed_counts"] == first["counts"]
    assert [b["replayed"] for b in again["batches"]] == [True, True]
    assert sum(b["counts"]["job_instances"] for b in first["batches"] + again["batches"]) == 2
    batch_keys = {frozenset(b) for b in first["batches"] + again["batches"]}
    assert len(batch_keys) == 1


# -- ages, settings, quiet reads, a readable list -----------------------------------------


@pytest.mark.parametrize(("seconds", "duration"), [("900", "15m"), ("3600", "1h"), ("90", "90s")])
def test_unresolved_for_takes_the_apis_syntax(orphan, seconds, duration):
    by_seconds = run("batch_executions", "--unresolved-for", seconds)["executions"]
    by_duration = run("batch_executions", "--unresolved-for", duration)["executions"]
    assert [e["id"] for e in by_seconds] == [e["id"] for e in by_duration]


@pytest.mark.parametrize("age", ["15 m", " 15m", "15M", "1.5h", "-1", "4000d"])
def test_an_age_the_api_refuses_the_command_refuses(age):
    with pytest.raises(CommandError) as error:
        call_command("batch_executions", "--unresolved-for", age, stdout=io.StringIO())
    assert "invalid age" in str(error.value)


def test_a_purge_age_error_names_the_setting(world):
    with override_settings(OXIDE_BATCH_PURGE_MIN_AGE=timedelta(days=36500)):
        code, message, document = refused(PURGE, "--older-than", "1h", "--dry-run")
    assert code == 2
    assert message.startswith("age_bound_too_small: ")
    assert message.endswith("(OXIDE_BATCH_PURGE_MIN_AGE)")
    assert document["error"]["setting"] == "OXIDE_BATCH_PURGE_MIN_AGE"


def test_a_recovery_too_early_names_the_setting(system_repo, clock):
    fresh = move(system_repo, launch(system_repo), S.STARTED, clock=clock)
    digest = run("batch_show", str(fresh.id))["proposal"]["evidence_digest"]
    code, message, _ = refused(
        "batch_recover", str(fresh.id), "--expected-version", "1", "--disposition",
        "ABANDON", "--reason", "WORKER_LOST", "--evidence-digest", digest,
        "--operation-id", "early", "--yes",
    )  # fmt: skip
    assert code == 3
    assert message.startswith("execution_not_stale: ")
    assert "(OXIDE_BATCH_RECOVERY_STALE_AFTER)\nhint: " in message


@pytest.mark.standalone
def test_read_only_commands_write_no_event_lines(orphan, events):
    run("batch_show", str(orphan.id))
    run("batch_executions", "--unresolved-for", "15m")
    text("batch_executions", "--instance", str(orphan.job_instance_id))
    assert events.records == []
    service().propose(orphan.id)  # the same read elsewhere (the API) is an event
    assert [r.getMessage() for r in events.records] == ["recovery.proposed"]


def test_batch_executions_prints_a_header_and_human_durations(orphan, clock):
    clock.advance(timedelta(hours=4, minutes=33))  # inactive 5 h 03 min in all
    lines = text("batch_executions", "--unresolved-for", "15m").splitlines()
    assert lines[0].split()[:6] == ["ID", "JOB", "ATTEMPT", "STATUS", "VERSION", "INACTIVE"]
    assert "5 h 03 min" in lines[1]
    finished = text("batch_executions", "--instance", str(orphan.job_instance_id))
    assert finished.splitlines()[0].startswith(lines[0][:20])
    document = run("batch_executions", "--unresolved-for", "15m")
    assert set(document) == {"command", "ok", "exit_code", "executions"}
