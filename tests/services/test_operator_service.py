"""Audited, idempotent operator actions (contract §2.5.9, §2.5.5; contract scenarios 5.7, 7.x).

The service's logic runs on the in-memory fake (``repo`` is ``tests.fakes``'s,
no database); the race of two identical requests needs the Django adapter and
PostgreSQL (``django_repo``), and the actor of a Django user its accounts."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model

from oxide_batch import models
from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    FailureCategory,
    LifecycleTransition,
    RecoveryDisposition,
)
from oxide_batch.domain.errors import (
    ExecutionNotStale,
    InvalidCharacters,
    InvalidState,
    JobExecutionNotFound,
    OperationIdConflict,
    RecoveryEvidenceStale,
    RecoveryNotAllowed,
    StaleVersion,
    UnresolvedRecoveryRequired,
)
from oxide_batch.domain.operator import OperatorRecord
from oxide_batch.services.audit import Actor, Outcome
from oxide_batch.services.bootstrap import operator_service
from tests.concurrency.support import run_in_threads
from tests.conftest import accounts_fixture
from tests.fakes import FakeJobRepository
from tests.helpers import failure, launch, move

S = BatchStatus
ALICE = Actor("alice", 7)
BOB = Actor("bob", 8)
_accounts = accounts_fixture(ALICE, BOB)


@pytest.fixture
def repo(memory_repo: FakeJobRepository) -> FakeJobRepository:
    """This module's repository: the in-memory fake."""
    return memory_repo


@pytest.fixture
def service(repo):
    return operator_service(repo, stale_after=timedelta(minutes=15))


def audit_rows(repo: FakeJobRepository) -> list[OperatorRecord]:
    """The operator requests recorded (committed), oldest first."""
    return sorted(repo.tables.operator_requests.values(), key=lambda record: record.id)


# -- stop ---------------------------------------------------------------------------


def test_a_stop_is_applied_and_audited(service, repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    result = service.stop(execution.id, expected_version=1, actor=ALICE, operation_id="stop-1")
    assert (result.outcome, result.changed, result.operation_id) == (
        Outcome.APPLIED,
        True,
        "stop-1",
    )
    assert (result.execution.status, result.execution.version) == (S.STARTED, 1)
    [row] = audit_rows(repo)
    assert (row.action, row.outcome, row.actor, row.actor_user_id) == (
        "STOP",
        "APPLIED",
        "alice",
        7,
    )
    assert (row.prior_status, row.result_status, row.observed_version) == ("STARTED", "STARTED", 1)
    assert row.job_execution_id == execution.id
    assert result.record.id == row.id
    stored = repo.stored_execution(execution.id)
    assert stored.stop_requested_by == "alice"


def test_a_replay_returns_the_recorded_outcome_and_acts_once(service, repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    first = service.stop(execution.id, expected_version=1, actor=ALICE, operation_id="stop-1")
    clock.advance(timedelta(seconds=5))
    again = service.stop(execution.id, expected_version=1, actor=BOB, operation_id="stop-1")
    assert again.outcome is Outcome.REPLAYED
    assert again.record == first.record
    assert again.changed is True
    assert len(audit_rows(repo)) == 1
    # The second actor did not overwrite who asked: nothing acted twice.
    assert repo.stored_execution(execution.id).stop_requested_by == "alice"


def test_the_same_operation_id_for_another_request_is_a_conflict(service, repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    service.stop(execution.id, expected_version=1, actor=ALICE, operation_id="op")
    with pytest.raises(OperationIdConflict):
        service.stop(execution.id, expected_version=0, actor=ALICE, operation_id="op")
    assert len(audit_rows(repo)) == 1  # a conflict is not audited


@pytest.mark.parametrize(
    "path", [(S.STOPPING,), (S.STARTED, S.COMPLETED)], ids=["STOPPING", "COMPLETED"]
)
def test_a_stop_of_a_stopping_or_finished_execution_is_a_no_op_without_version_check(
    service, repo, clock, path
):
    execution = move(repo, launch(repo), *path, clock=clock)
    result = service.stop(execution.id, expected_version=999, actor=ALICE, operation_id="s")
    assert (result.outcome, result.changed) == (Outcome.APPLIED, False)
    assert audit_rows(repo)[0].outcome == "APPLIED"


def test_a_refused_stop_is_audited_as_rejected_and_replays_as_the_same_error(service, repo, clock):
    execution = move(repo, launch(repo), S.UNKNOWN, clock=clock)
    with pytest.raises(InvalidState) as first:
        service.stop(execution.id, expected_version=1, actor=ALICE, operation_id="s")
    [row] = audit_rows(repo)
    assert (row.outcome, row.rejection_code) == ("REJECTED", "invalid_state")
    assert (row.prior_status, row.result_status) == (None, None)
    with pytest.raises(InvalidState) as replay:
        service.stop(execution.id, expected_version=1, actor=BOB, operation_id="s")
    assert replay.value.details() == first.value.details()
    assert getattr(replay.value, "replayed", False) is True
    assert not getattr(first.value, "replayed", False)
    assert len(audit_rows(repo)) == 1


def test_not_found_is_not_audited(service, repo):
    with pytest.raises(JobExecutionNotFound):
        service.stop(424242, expected_version=0, actor=ALICE, operation_id="s")
    assert audit_rows(repo) == []


def test_invalid_operation_ids_are_refused_before_anything(service, repo):
    execution = launch(repo)
    with pytest.raises(InvalidCharacters):
        service.stop(execution.id, expected_version=0, actor=ALICE, operation_id="no spaces")
    assert audit_rows(repo) == []


# -- abandon ------------------------------------------------------------------------


@pytest.mark.parametrize("ending", [S.STOPPED, S.FAILED])
def test_abandon_of_a_stopped_or_failed_attempt(service, repo, clock, ending):
    execution = move(repo, launch(repo), S.STARTED, ending, clock=clock)
    result = service.abandon(
        execution.id, expected_version=2, reason_code="NOT_NEEDED", actor=ALICE, operation_id="a"
    )
    assert (result.outcome, result.changed, result.execution.status) == (
        Outcome.APPLIED,
        True,
        S.ABANDONED,
    )
    [row] = audit_rows(repo)
    assert (row.prior_status, row.result_status, row.reason_code) == (
        ending.value,
        "ABANDONED",
        "NOT_NEEDED",
    )


def test_abandon_of_an_abandoned_attempt_is_a_no_op(service, repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.STOPPED, S.ABANDONED, clock=clock)
    result = service.abandon(
        execution.id, expected_version=0, reason_code="AGAIN", actor=ALICE, operation_id="a"
    )
    assert (result.outcome, result.changed) == (Outcome.APPLIED, False)


@pytest.mark.parametrize("path", [(S.STARTED,), (S.UNKNOWN,), (S.STARTED, S.COMPLETED)])
def test_abandon_of_anything_else_is_invalid_state(service, repo, clock, path):
    execution = move(repo, launch(repo), *path, clock=clock)
    with pytest.raises(InvalidState):
        service.abandon(
            execution.id,
            expected_version=execution.version,
            reason_code="X",
            actor=ALICE,
            operation_id="a",
        )
    assert audit_rows(repo)[0].rejection_code == "invalid_state"


def test_a_stale_abandon_is_rejected_and_changes_nothing(service, repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.FAILED, clock=clock)
    with pytest.raises(StaleVersion):
        service.abandon(
            execution.id, expected_version=1, reason_code="X", actor=ALICE, operation_id="a"
        )
    assert audit_rows(repo)[0].rejection_code == "stale_version"
    assert repo.stored_execution(execution.id).status == "FAILED"


# -- recover ------------------------------------------------------------------------


def orphan(repo, clock, minutes=16):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    clock.advance(timedelta(minutes=minutes))
    return execution


def recover(service, execution, proposal, **overrides):
    arguments = {
        "expected_version": execution.version,
        "disposition": RecoveryDisposition.MARK_FAILED,
        "reason_code": "WORKER_LOST",
        "evidence_digest": proposal.evidence_digest,
        "actor": ALICE,
        "operation_id": "r",
    }
    arguments.update(overrides)
    return service.recover(execution.id, **arguments)


def test_a_stale_orphan_is_marked_failed_with_an_audited_decision(service, repo, clock):
    execution = orphan(repo, clock)
    proposal = service.propose(execution.id)
    assert proposal.eligible
    result = recover(service, execution, proposal)
    assert result.outcome is Outcome.APPLIED
    assert result.execution.status is S.FAILED
    assert result.execution.failure.category is FailureCategory.STALE_RECOVERED
    assert result.execution.failure.failure_id > 0  # generated by the server
    assert result.decision.evidence_digest.hex() == proposal.evidence_digest
    assert result.decision.operator_reference == "alice"
    assert repo.tables.decision_users == {result.decision.id: 7}
    assert audit_rows(repo)[0].result_status == "FAILED"
    with repo.begin() as uow:
        restart = uow.create_job_execution(execution.job_instance_id)  # restartable
    assert restart.attempt == 2


def test_a_fresh_execution_is_not_stale(service, repo, clock):
    execution = orphan(repo, clock, minutes=5)
    proposal = service.propose(execution.id)
    assert (proposal.eligible, proposal.reason_code) == (False, "execution_not_stale")
    with pytest.raises(ExecutionNotStale):
        recover(service, execution, proposal)
    assert audit_rows(repo)[0].rejection_code == "execution_not_stale"


def test_a_finished_execution_is_not_recoverable(service, repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.COMPLETED, clock=clock)
    proposal = service.propose(execution.id)
    assert (proposal.eligible, proposal.reason_code) == (False, "recovery_not_allowed")
    with pytest.raises(RecoveryNotAllowed):
        recover(service, execution, proposal)


def test_the_version_is_checked_first(service, repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.COMPLETED, clock=clock)
    proposal = service.propose(execution.id)
    with pytest.raises(StaleVersion):
        recover(service, execution, proposal, expected_version=0)


def test_changed_evidence_is_recovery_evidence_stale(service, repo, clock):
    execution = orphan(repo, clock)
    with repo.begin() as uow:
        step = uow.create_step_execution(execution.id, "load")
        step = uow.transition_step_execution(step.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    clock.advance(timedelta(minutes=16))
    proposal = service.propose(execution.id)
    with repo.begin() as uow:  # the runtime was alive after all: a chunk commits
        uow.commit_chunk(step.id, step.version, ExecutionCounts(read=1))
        uow.commit()
    clock.advance(timedelta(minutes=16))
    with pytest.raises(RecoveryEvidenceStale):
        recover(service, execution, proposal)
    assert repo.stored_execution(execution.id).status == "STARTED"


def test_an_unknown_commit_needs_unknown_effect_to_be_marked_failed(service, repo, clock):
    """Contract scenario 5.7."""
    execution = move(repo, launch(repo), S.UNKNOWN, clock=clock)
    proposal = service.propose(execution.id)
    assert proposal.eligible
    assert proposal.unknown_commit
    with pytest.raises(UnresolvedRecoveryRequired):
        recover(service, execution, proposal, reason_code="COMMIT_INSPECTED", operation_id="r1")
    result = recover(service, execution, proposal, reason_code="UNKNOWN_EFFECT", operation_id="r2")
    assert result.execution.failure.category is FailureCategory.UNKNOWN_COMMIT
    rows = audit_rows(repo)
    assert [(r.operation_id, r.outcome) for r in rows] == [("r1", "REJECTED"), ("r2", "APPLIED")]
    assert rows[1].prior_status == "UNKNOWN"


def test_abandon_recovery_needs_no_unknown_effect(service, repo, clock):
    execution = move(repo, launch(repo), S.UNKNOWN, clock=clock)
    proposal = service.propose(execution.id)
    result = recover(service, execution, proposal, disposition=RecoveryDisposition.ABANDON)
    assert result.execution.status is S.ABANDONED


def test_a_given_failure_is_used_and_a_replay_returns_the_decision(service, repo, clock):
    execution = orphan(repo, clock)
    proposal = service.propose(execution.id)
    first = recover(
        service,
        execution,
        proposal,
        failure_category=FailureCategory.PERMANENT_INFRASTRUCTURE,
        failure_id=945,
    )
    assert first.execution.failure == failure(945).__class__(
        FailureCategory.PERMANENT_INFRASTRUCTURE, 945
    )
    again = recover(
        service,
        execution,
        proposal,
        failure_category=FailureCategory.PERMANENT_INFRASTRUCTURE,
        failure_id=945,
    )
    assert again.outcome is Outcome.REPLAYED
    assert again.decision == first.decision
    assert len(repo.tables.decisions) == 1


def test_a_malformed_evidence_digest_is_invalid_input_and_not_audited(service, repo, clock):
    execution = orphan(repo, clock)
    proposal = service.propose(execution.id)
    with pytest.raises(InvalidCharacters):
        recover(service, execution, proposal, evidence_digest="XYZ")
    assert audit_rows(repo) == []


# -- actors -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_audited_actor_is_the_username_or_user_id():
    users = get_user_model()
    plain = users.objects.create_user("carol.ops@example")
    odd = users.objects.create_user("dave smith")
    assert Actor.for_user(plain) == Actor("carol.ops@example", plain.pk)
    assert Actor.for_user(odd) == Actor(f"user:{odd.pk}", odd.pk)


# -- races --------------------------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_two_identical_requests_at_once_act_once_with_one_audit_row(django_repo, clock):
    execution = move(django_repo, launch(django_repo), S.STARTED, S.FAILED, clock=clock)
    service = operator_service(django_repo, stale_after=timedelta(minutes=15))
    barrier = threading.Barrier(2)

    def abandon(index: int):
        barrier.wait()
        return service.abandon(
            execution.id,
            expected_version=execution.version,
            reason_code="DUPLICATE",
            actor=Actor(f"operator-{index}"),
            operation_id="same-op",
        )

    outcomes = run_in_threads(2, abandon)
    assert all(outcome.ok for outcome in outcomes), [o.error for o in outcomes]
    assert sorted(o.value.outcome for o in outcomes) == [Outcome.APPLIED, Outcome.REPLAYED]
    assert models.OperatorRequest.objects.count() == 1
    assert models.JobExecution.objects.get(pk=execution.id).version == execution.version + 1
