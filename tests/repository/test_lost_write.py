"""A lost write is named, never taken for a conflict (issue 26 point 3).

A write whose expected version is *ahead* of the stored row means the caller saw
a write the repository no longer has — an acknowledged commit lost in a
failover. It is refused as ``version_ahead`` (not ``stale_version``), and the
refusal marks the execution in a transaction of its own; the marker counts as
the unknown-commit marker, so the watchdog leaves the execution and a recovery
needs an operator's UNKNOWN_EFFECT. The loss is produced here deterministically:
the stored row's version is moved back by one, as a standby that never received
the last commit would hold it."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db.models import F

from oxide_batch import models
from oxide_batch.domain import BatchStatus, ExecutionCounts, LifecycleTransition
from oxide_batch.domain.errors import (
    StaleVersion,
    UnresolvedRecoveryRequired,
    VersionAhead,
)
from oxide_batch.domain.lifecycle import validate_expected_version
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.management.commands._cli import ExitCode
from oxide_batch.services.audit import Actor
from oxide_batch.services.bootstrap import operator_service
from tests.helpers import launch, move

pytestmark = pytest.mark.django_db
S = BatchStatus
OLGA = Actor("olga")


def test_a_version_ahead_is_not_a_stale_version():
    with pytest.raises(VersionAhead) as ahead:
        validate_expected_version(5, 4)
    assert (ahead.value.code, ahead.value.expected, ahead.value.actual) == ("version_ahead", 5, 4)
    assert "lost an acknowledged write" in ahead.value.message
    with pytest.raises(StaleVersion):
        validate_expected_version(3, 4)
    validate_expected_version(4, 4)


def running_step(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, step.version, LifecycleTransition(S.STARTED))
        step = uow.commit_chunk(step.id, step.version, ExecutionCounts(read=5, written=5))
        uow.commit()
    return execution, step


def lose_the_last_write(model, pk):
    """What a failover to a standby that missed the last commit leaves: the row
    one version back."""
    model.objects.filter(pk=pk).update(version=F("version") - 1)


def test_a_chunk_after_a_lost_write_is_refused_and_marks_the_execution(repo, clock):
    execution, step = running_step(repo, clock)
    lose_the_last_write(models.StepExecution, step.id)
    clock.advance(timedelta(seconds=3))

    with pytest.raises(VersionAhead) as refused, repo.begin() as uow:
        uow.commit_chunk(step.id, step.version, ExecutionCounts(read=5, written=5))

    error = refused.value
    assert (error.expected, error.actual, error.job_execution_id) == (
        step.version,
        step.version - 1,
        execution.id,
    )
    assert error.details()["expected"] == step.version
    row = models.StepExecution.objects.get(pk=step.id)
    assert (row.read_count, row.version) == (5, step.version - 1)  # nothing written
    marker = models.JobExecution.objects.get(pk=execution.id).lost_write
    assert marker == {
        "detected_at": "2026-01-01T00:00:04.000Z",
        "expected_version": step.version,
        "stored_version": step.version - 1,
    }


def test_a_stale_version_marks_nothing(repo, clock):
    execution, step = running_step(repo, clock)
    with pytest.raises(StaleVersion), repo.begin() as uow:
        uow.commit_chunk(step.id, step.version - 1, ExecutionCounts(read=1))
    assert models.JobExecution.objects.get(pk=execution.id).lost_write is None


def test_an_execution_transition_after_a_lost_write_marks_it_once(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    lose_the_last_write(models.JobExecution, execution.id)
    for _ in range(2):
        with pytest.raises(VersionAhead), repo.begin() as uow:
            uow.transition_job_execution(
                execution.id, execution.version, LifecycleTransition(S.COMPLETED)
            )
        clock.advance(timedelta(seconds=10))
    row = models.JobExecution.objects.get(pk=execution.id)
    assert row.status == "STARTED"
    assert row.lost_write["detected_at"] == "2026-01-01T00:00:01.000Z"  # the first kept


def test_the_marker_is_an_unknown_commit_the_operator_must_decide(repo, clock):
    execution, step = running_step(repo, clock)
    lose_the_last_write(models.StepExecution, step.id)
    with pytest.raises(VersionAhead), repo.begin() as uow:
        uow.commit_chunk(step.id, step.version, ExecutionCounts(read=1))
    clock.advance(timedelta(hours=1))
    service = operator_service(repo, stale_after=timedelta(minutes=15))
    proposal = service.propose(execution.id)
    assert proposal.evidence.lost_write
    assert proposal.unknown_commit  # the watchdog skips it; UNKNOWN_EFFECT needed

    def recover(reason, operation_id):
        return service.recover(
            execution.id,
            expected_version=proposal.version,
            disposition=RecoveryDisposition.MARK_FAILED,
            reason_code=reason,
            evidence_digest=proposal.evidence_digest,
            actor=OLGA,
            operation_id=operation_id,
        )

    with pytest.raises(UnresolvedRecoveryRequired):
        recover("WORKER_LOST", "r-1")
    decided = recover("UNKNOWN_EFFECT", "r-2")
    assert decided.execution.failure.category.value == "UNKNOWN_COMMIT"


def test_an_operator_action_with_a_version_ahead_is_refused_as_such(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    service = operator_service(repo, stale_after=timedelta(minutes=15))
    with pytest.raises(VersionAhead):
        service.stop(execution.id, expected_version=execution.version + 1, actor=OLGA,
                     operation_id="s-1")  # fmt: skip
    assert models.JobExecution.objects.get(pk=execution.id).lost_write is not None
    row = models.OperatorRequest.objects.get(operation_id="s-1")
    assert (row.outcome, row.rejection_code) == ("REJECTED", "version_ahead")


def test_the_commands_exit_with_their_own_code(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with pytest.raises(CommandError) as refused:
        call_command(
            "batch_stop", str(execution.id), "--expected-version", str(execution.version + 1),
            "--operation-id", "s-1", stdout=io.StringIO(), stderr=io.StringIO(),
        )  # fmt: skip
    assert refused.value.returncode == ExitCode.LOST_WRITE == 9
    assert "lost an acknowledged write" in str(refused.value)
