"""The history keeps its facts (issue 25, decisions 132–135): a failure stays a
failure after an abandon, an operator's action never moves the runtime's
activity (on the execution or its steps), a decision keeps the evidence it was
taken on, and every applied action a user takes is in the admin's own history.

On the Django adapter (``repo``, a database): the facts are the stored rows and
Django's own ``LogEntry``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType

from oxide_batch import models
from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    LifecycleTransition,
    RecoveryDisposition,
)
from oxide_batch.domain.recovery import FAILURE_ID_GIVEN
from oxide_batch.services.audit import Actor, Outcome
from oxide_batch.services.bootstrap import operator_service, retention_service
from tests.conftest import accounts_fixture
from tests.helpers import launch, move, recover_as_proposed

pytestmark = pytest.mark.django_db
S = BatchStatus
OLGA = Actor("olga", 11)
WATCHDOG = Actor("watchdog@host-1", None)
_accounts = accounts_fixture(OLGA)


@pytest.fixture
def service(repo):
    return operator_service(repo, stale_after=timedelta(minutes=15))


def running_with_a_chunk(repo, clock):
    """A STARTED execution whose step committed one chunk, then went silent."""
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        uow.commit()
    clock.advance(timedelta(seconds=1))
    with repo.begin() as uow:
        step = uow.transition_step_execution(step.id, step.version, _to(S.STARTED))
        uow.commit()
    clock.advance(timedelta(seconds=1))
    with repo.begin() as uow:
        step = uow.commit_chunk(step.id, step.version, ExecutionCounts(read=5, written=5))
        uow.commit()
    return execution, step


def _to(status):
    return LifecycleTransition(status)


def stored(execution_id):
    return models.JobExecution.objects.get(pk=execution_id)


def recover(service, execution_id, disposition, actor=OLGA, operation_id="r-1"):
    return recover_as_proposed(
        service, execution_id, actor=actor, operation_id=operation_id, disposition=disposition
    )


def history(target, object_id):
    content_type = ContentType.objects.get_for_model(target)
    return list(
        LogEntry.objects.filter(content_type=content_type, object_id=str(object_id)).order_by("id")
    )


def test_a_step_write_is_its_activity_and_a_recovery_moves_neither_its_nor_the_executions(
    service, repo, clock
):
    execution, step = running_with_a_chunk(repo, clock)
    chunk_at = clock.now()
    step_row = models.StepExecution.objects.get(pk=step.id)
    assert step_row.last_activity_at == chunk_at
    own_activity = stored(execution.id).last_activity_at
    clock.advance(timedelta(hours=5))

    result = recover(service, execution.id, RecoveryDisposition.MARK_FAILED)

    assert result.outcome is Outcome.APPLIED
    step_row = models.StepExecution.objects.get(pk=step.id)
    assert (step_row.status, step_row.ended_at, step_row.updated_at) == (
        "FAILED",
        clock.now(),
        clock.now(),
    )
    assert step_row.last_activity_at == chunk_at  # the worker's, not the decision's
    row = stored(execution.id)
    assert row.last_activity_at == own_activity
    assert row.updated_at == clock.now()
    # What the API and the commands show as the step's activity.
    with repo.begin() as uow:
        assert uow.get_step_execution(step.id).last_activity_at == chunk_at


def test_abandon_and_stop_never_move_the_activity(service, repo, clock):
    execution, step = running_with_a_chunk(repo, clock)
    before = stored(execution.id).last_activity_at
    clock.advance(timedelta(minutes=1))
    service.stop(execution.id, expected_version=execution.version, actor=OLGA, operation_id="s")
    assert stored(execution.id).last_activity_at == before
    stopped = move(repo, repo_get(repo, execution.id), S.STOPPING, S.STOPPED, clock=clock)
    after_runtime = stored(execution.id).last_activity_at
    assert after_runtime == clock.now()  # the runtime's own ending is activity
    clock.advance(timedelta(hours=1))
    service.abandon(
        execution.id,
        expected_version=stopped.version,
        reason_code="NOT_NEEDED",
        actor=OLGA,
        operation_id="a",
    )
    row = stored(execution.id)
    assert row.status == "ABANDONED"
    assert row.last_activity_at == after_runtime
    assert models.StepExecution.objects.get(pk=step.id).last_activity_at < after_runtime


def repo_get(repo, execution_id):
    with repo.begin() as uow:
        return uow.get_job_execution(execution_id)


def test_a_failure_keeps_its_time_after_an_abandon(service, repo, clock):
    failed = move(repo, launch(repo), S.STARTED, S.FAILED, clock=clock)
    failed_at = clock.now()
    assert stored(failed.id).failed_at == failed_at
    clock.advance(timedelta(hours=2))
    service.abandon(
        failed.id,
        expected_version=failed.version,
        reason_code="NOT_NEEDED",
        actor=OLGA,
        operation_id="a",
    )
    row = stored(failed.id)
    assert (row.status, row.failed_at) == ("ABANDONED", failed_at)


@pytest.mark.parametrize(
    ("disposition", "failed"),
    [(RecoveryDisposition.MARK_FAILED, True), (RecoveryDisposition.ABANDON, False)],
)
def test_a_recovery_that_fails_a_run_records_when(service, repo, clock, disposition, failed):
    execution, _ = running_with_a_chunk(repo, clock)
    clock.advance(timedelta(hours=1))
    recover(service, execution.id, disposition)
    assert stored(execution.id).failed_at == (clock.now() if failed else None)


def test_a_finished_run_has_no_failure_time(repo, clock):
    completed = move(repo, launch(repo), S.STARTED, S.COMPLETED, clock=clock)
    assert stored(completed.id).failed_at is None


def test_a_decision_keeps_the_evidence_it_was_taken_on_with_its_times(service, repo, clock):
    execution, _ = running_with_a_chunk(repo, clock)
    chunk_at = clock.now()
    clock.advance(timedelta(hours=1))
    proposal = service.propose(execution.id)

    result = recover(service, execution.id, RecoveryDisposition.MARK_FAILED)

    decision = models.RecoveryDecision.objects.get(pk=result.decision.id)
    recorded = decision.evidence
    # What the proposal showed, and whether the failure id was the operator's.
    assert recorded == {**proposal.recorded(), FAILURE_ID_GIVEN: False}
    assert recorded["evidence"]["newest_step_write_at"] == "2026-01-01T00:00:03.000Z"
    assert recorded["last_activity_at"] == recorded["evidence"]["newest_step_write_at"]
    assert chunk_at.isoformat().startswith("2026-01-01T00:00:03")
    assert (recorded["rule"], recorded["inactive_seconds"], recorded["threshold_seconds"]) == (
        "inactivity",
        3600,
        900,
    )
    with repo.begin() as uow:
        assert uow.recovery_decision(execution.id).evidence == recorded


def test_every_applied_action_of_a_user_is_in_the_admin_history(service, repo, clock):
    execution, _ = running_with_a_chunk(repo, clock)
    stopped = service.stop(
        execution.id, expected_version=execution.version, actor=OLGA, operation_id="s"
    )
    clock.advance(timedelta(hours=1))
    result = recover(service, execution.id, RecoveryDisposition.MARK_FAILED)
    failed = stored(execution.id)
    service.abandon(
        execution.id,
        expected_version=failed.version,
        reason_code="NOT_NEEDED",
        actor=OLGA,
        operation_id="a",
    )
    retention = retention_service(repo)
    retention.place_hold(
        execution.job_instance_id, actor=OLGA, reason_code="LEGAL_HOLD", operation_id="h"
    )
    retention.release_hold(
        execution.job_instance_id, actor=OLGA, reason_code="CASE_CLOSED", operation_id="u"
    )

    entries = history(models.JobExecution, execution.id)
    assert [(e.user_id, e.action_flag) for e in entries] == [(11, CHANGE)] * 3
    stop, recovered, abandoned = (e.change_message for e in entries)
    assert stop.startswith("Stop requested")
    assert stop.endswith(f"operator request #{stopped.record.id} (s)")
    assert recovered.startswith("Recovered: STARTED → FAILED")
    assert f"recovery decision #{result.decision.id}" in recovered
    assert abandoned.startswith("Abandoned: FAILED → ABANDONED")
    held = history(models.JobInstance, execution.job_instance_id)
    assert [e.change_message.split(",")[0] for e in held] == ["Hold placed", "Hold released"]
    # Django's own pages read them: "Recent actions" and the object's HISTORY.
    assert str(entries[1].get_admin_url()).endswith(f"/jobexecution/{execution.id}/change/")


def test_a_replay_a_refusal_and_the_watchdog_add_nothing_to_the_admin_history(service, repo, clock):
    execution, _ = running_with_a_chunk(repo, clock)
    clock.advance(timedelta(hours=1))
    recover(service, execution.id, RecoveryDisposition.MARK_FAILED, actor=WATCHDOG)
    assert history(models.JobExecution, execution.id) == []  # no account: the audit rows say
    assert models.RecoveryDecision.objects.get(job_execution_id=execution.id).operator_reference

    other, _ = running_with_a_chunk(repo, clock)
    service.stop(other.id, expected_version=other.version, actor=OLGA, operation_id="s2")
    service.stop(other.id, expected_version=other.version, actor=OLGA, operation_id="s2")
    assert len(history(models.JobExecution, other.id)) == 1  # the replay wrote none
    with pytest.raises(Exception):  # noqa: B017, PT011 (a refusal of any kind)
        service.abandon(
            other.id, expected_version=99, reason_code="NOT_NEEDED", actor=OLGA, operation_id="a2"
        )
    assert len(history(models.JobExecution, other.id)) == 1


def test_an_actor_without_an_account_is_never_credited_to_one_by_its_name(service, repo, clock):
    """Decision 155: the history names the account that acted (``user_id``), not
    one whose name the actor's free text happens to be."""
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    service.stop(execution.id, expected_version=1, actor=Actor("cli:olga", None), operation_id="s")
    assert history(models.JobExecution, execution.id) == []
    assert models.OperatorRequest.objects.get(operation_id="s").actor == "cli:olga"
