"""Launch and restart rules (contract §2.2.2; contract scenarios 1.14, 1.16-1.18, 2.8-2.11)."""

from __future__ import annotations

import pytest

from oxide_batch.domain import (
    BatchStatus,
    ExecutionCounts,
    ExecutionTimestamps,
    LifecycleTransition,
    plan_new_attempt,
)
from oxide_batch.domain.errors import (
    AbandonedInstance,
    CompletedInstance,
    ExecutionAlreadyActive,
    InvalidTransitionTime,
    NotRestartable,
)
from oxide_batch.domain.lifecycle import (
    INITIAL_VERSION,
    compare_and_transition,
    validate_restart,
)
from tests.domain.builders import at, job_execution

S = BatchStatus
INSTANCE_ID = 30
RESTARTABLE = [S.STOPPED, S.FAILED]
ACTIVE_OR_UNKNOWN = [S.STARTING, S.STARTED, S.STOPPING, S.UNKNOWN]
NOT_RESTARTABLE = [S.STARTING, S.STARTED, S.STOPPING, S.COMPLETED, S.ABANDONED, S.UNKNOWN]


def test_an_instance_without_attempts_gets_attempt_one_with_no_restart_of():
    attempt = plan_new_attempt(INSTANCE_ID, None, at(200))
    assert (attempt.job_instance_id, attempt.attempt, attempt.restart_of_id) == (
        INSTANCE_ID,
        1,
        None,
    )


def test_a_new_attempt_is_starting_with_exit_unknown_zero_counts_and_only_a_creation_time():
    metadata = plan_new_attempt(INSTANCE_ID, None, at(200)).metadata
    assert metadata.status is S.STARTING
    assert metadata.exit_code == "UNKNOWN"
    assert metadata.counts == ExecutionCounts()
    assert metadata.timestamps == ExecutionTimestamps(at(200), None, None)
    assert metadata.failure is None


def test_a_new_attempt_starts_at_version_zero_and_its_first_transition_makes_it_one():
    assert INITIAL_VERSION == 0
    metadata = plan_new_attempt(INSTANCE_ID, None, at(200)).metadata
    started, version = compare_and_transition(
        metadata, INITIAL_VERSION, 0, LifecycleTransition(S.STARTED, at=at(201))
    )
    assert (started.status, version) == (S.STARTED, 1)


def test_a_completed_latest_attempt_makes_the_instance_completed():
    with pytest.raises(CompletedInstance) as caught:
        plan_new_attempt(INSTANCE_ID, job_execution(S.COMPLETED), at(200))
    assert caught.value.id == INSTANCE_ID


def test_an_abandoned_latest_attempt_makes_the_instance_abandoned():
    with pytest.raises(AbandonedInstance) as caught:
        plan_new_attempt(INSTANCE_ID, job_execution(S.ABANDONED), at(200))
    assert caught.value.id == INSTANCE_ID


@pytest.mark.parametrize("status", ACTIVE_OR_UNKNOWN)
def test_an_active_or_unknown_latest_attempt_blocks_a_new_attempt_naming_it(status):
    latest = job_execution(status, execution_id=31)
    with pytest.raises(ExecutionAlreadyActive) as caught:
        plan_new_attempt(INSTANCE_ID, latest, at(200))
    assert (caught.value.instance_id, caught.value.execution_id, caught.value.status) == (
        INSTANCE_ID,
        31,
        status,
    )


@pytest.mark.parametrize("status", RESTARTABLE)
def test_a_stopped_or_failed_latest_attempt_is_followed_by_the_next_attempt(status):
    latest = job_execution(status, execution_id=31, attempt=3)
    attempt = plan_new_attempt(INSTANCE_ID, latest, at(200))
    assert (attempt.attempt, attempt.restart_of_id) == (4, 31)
    assert attempt.job_instance_id == INSTANCE_ID
    assert attempt.metadata.status is S.STARTING
    assert attempt.metadata.exit_code == "UNKNOWN"
    assert attempt.metadata.counts == ExecutionCounts()
    assert attempt.metadata.timestamps == ExecutionTimestamps(at(200), None, None)
    assert attempt.metadata.failure is None


EVERY_STATUS_OUTCOME = {
    S.STARTING: ExecutionAlreadyActive,
    S.STARTED: ExecutionAlreadyActive,
    S.STOPPING: ExecutionAlreadyActive,
    S.UNKNOWN: ExecutionAlreadyActive,
    S.COMPLETED: CompletedInstance,
    S.ABANDONED: AbandonedInstance,
    S.STOPPED: None,
    S.FAILED: None,
}


@pytest.mark.parametrize("status", list(BatchStatus), ids=str)
def test_the_latest_attempt_status_decides_whether_a_new_attempt_may_be_made(status):
    error = EVERY_STATUS_OUTCOME[status]  # a new status without an outcome fails here
    latest = job_execution(status, execution_id=31, attempt=2)
    if error is None:
        assert plan_new_attempt(INSTANCE_ID, latest, at(200)).attempt == 3
    else:
        with pytest.raises(error):
            plan_new_attempt(INSTANCE_ID, latest, at(200))


@pytest.mark.parametrize("status", RESTARTABLE)
def test_a_new_attempt_created_before_the_prior_attempt_ended_is_refused(status):
    latest = job_execution(status)  # ended at 102 s
    with pytest.raises(InvalidTransitionTime):
        plan_new_attempt(INSTANCE_ID, latest, at(101))


@pytest.mark.parametrize("status", RESTARTABLE)
def test_a_new_attempt_created_exactly_when_the_prior_attempt_ended_is_accepted(status):
    attempt = plan_new_attempt(INSTANCE_ID, job_execution(status), at(102))
    assert attempt.metadata.timestamps.created_at == at(102)


@pytest.mark.parametrize("status", NOT_RESTARTABLE)
def test_only_stopped_or_failed_attempts_are_restartable(status):
    with pytest.raises(NotRestartable) as caught:
        validate_restart(status)
    assert caught.value.status is status


@pytest.mark.parametrize("status", RESTARTABLE)
def test_stopped_and_failed_attempts_are_restartable(status):
    assert validate_restart(status) is None
