"""The repository's audited recovery (contract scenarios 5.1, 5.3, 5.4, 5.12, 14.7):
the port's behavioural contract, on the Django adapter and the in-memory fake
(``contract``)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from oxide_batch.domain import (
    BatchStatus,
    FailureCategory,
    FailureSummary,
    LifecycleTransition,
    RecoveryRequest,
)
from oxide_batch.domain.errors import (
    AbandonedInstance,
    ExecutionAlreadyActive,
    JobExecutionNotFound,
    RecoveryNotAllowed,
    StaleVersion,
)
from tests.helpers import launch, move

pytestmark = pytest.mark.contract
S = BatchStatus


def mark_failed(version: int, evidence: bytes = b"\xa5" * 32) -> RecoveryRequest:
    return RecoveryRequest.mark_failed(
        expected_version=version,
        reason_code="COMMIT_INSPECTED_NOT_DURABLE",
        operator_reference="operator-correlation-42",
        evidence_digest=evidence,
        failure=FailureSummary(FailureCategory.PERMANENT_INFRASTRUCTURE, 900),
    )


def abandon(version: int) -> RecoveryRequest:
    return RecoveryRequest.abandon(
        expected_version=version,
        reason_code="ORPHAN_CONFIRMED",
        operator_reference="operator-correlation-99",
        evidence_digest=b"\x99" * 32,
    )


def test_recovering_an_unknown_execution_is_audited_and_then_allows_a_restart(repo, clock):
    execution = move(repo, launch(repo), S.UNKNOWN, clock=clock)
    with repo.begin() as uow, pytest.raises(ExecutionAlreadyActive):
        uow.create_job_execution(execution.job_instance_id)
    clock.advance(timedelta(seconds=1))
    with repo.begin() as uow:
        result = uow.recover_job_execution(execution.id, mark_failed(1))
        uow.commit()
    assert result.execution.status is S.FAILED
    assert result.execution.version == 2
    assert result.execution.ended_at == clock.now()
    assert result.execution.failure == FailureSummary(FailureCategory.PERMANENT_INFRASTRUCTURE, 900)
    decision = result.decision
    assert (decision.prior_status, decision.resulting_status) == (S.UNKNOWN, S.FAILED)
    assert decision.execution_version == 1
    assert decision.decided_at == clock.now()
    assert decision.evidence_digest == b"\xa5" * 32
    with repo.begin() as uow:
        assert uow.recovery_decision(execution.id) == decision
        assert uow.get_job_execution(execution.id) == result.execution
        restart = uow.create_job_execution(execution.job_instance_id)
        uow.commit()
    assert restart.id != execution.id
    assert restart.restart_of_id == execution.id


def test_abandon_recovery_of_a_started_orphan_makes_the_instance_terminal(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        result = uow.recover_job_execution(execution.id, abandon(1))
        uow.commit()
    assert result.execution.status is S.ABANDONED
    assert "ORPHAN_CONFIRMED" in repr(result.decision)
    assert "9999" not in repr(result.decision)
    with repo.begin() as uow, pytest.raises(AbandonedInstance):
        uow.create_job_execution(execution.job_instance_id)


def test_recovery_keeps_exit_code_counts_and_timestamps(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        execution = uow.enrich_job_exit_status(execution.id, 1, "PARTIAL")
        uow.commit()
    clock.advance(timedelta(minutes=30))
    with repo.begin() as uow:
        recovered = uow.recover_job_execution(execution.id, mark_failed(2)).execution
        uow.commit()
    assert recovered.exit_code == "PARTIAL"
    assert recovered.counts == execution.counts
    assert recovered.started_at == execution.started_at
    assert recovered.created_at == execution.created_at


@pytest.mark.parametrize(
    "path",
    [(S.STARTED, S.STOPPED), (S.STARTED, S.FAILED), (S.STARTED, S.COMPLETED)],
    ids=lambda path: path[-1].value,
)
def test_recovery_of_a_finished_execution_is_not_allowed_and_writes_nothing(repo, clock, path):
    execution = move(repo, launch(repo), *path, clock=clock)
    with repo.begin() as uow, pytest.raises(RecoveryNotAllowed) as error:
        uow.recover_job_execution(execution.id, abandon(execution.version))
    assert error.value.status is path[-1]
    with repo.begin() as uow:
        assert uow.recovery_decision(execution.id) is None


def test_a_stale_recovery_is_refused_before_the_status_rule(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.COMPLETED, clock=clock)
    with repo.begin() as uow, pytest.raises(StaleVersion):
        uow.recover_job_execution(execution.id, abandon(0))


def test_a_second_recovery_of_the_same_observed_version_is_stale(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        first = uow.recover_job_execution(execution.id, mark_failed(1)).decision
        uow.commit()
    with repo.begin() as uow, pytest.raises(StaleVersion):
        uow.recover_job_execution(execution.id, mark_failed(1))
    with repo.begin() as uow:
        assert uow.recovery_decision(execution.id) == first


def test_recovery_rolled_back_leaves_neither_decision_nor_state_change(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        uow.recover_job_execution(execution.id, mark_failed(1))
        uow.rollback()
    with repo.begin() as uow:
        assert uow.recovery_decision(execution.id) is None
        assert uow.get_job_execution(execution.id).status is S.STARTED


def test_recovery_of_a_missing_execution_is_not_found(repo):
    with repo.begin() as uow, pytest.raises(JobExecutionNotFound):
        uow.recover_job_execution(999, abandon(0))


def test_recovered_failure_is_restartable_and_transitions_continue_from_the_new_version(
    repo, clock
):
    execution = move(repo, launch(repo), S.STOPPING, clock=clock)
    with repo.begin() as uow:
        recovered = uow.recover_job_execution(execution.id, mark_failed(1)).execution
        abandoned = uow.transition_job_execution(
            execution.id, recovered.version, LifecycleTransition(S.ABANDONED)
        )
        uow.commit()
    assert abandoned.version == 3
    assert abandoned.ended_at == recovered.ended_at
