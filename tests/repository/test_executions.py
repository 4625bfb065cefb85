"""Launch, restart, lifecycle CAS and exit enrichment of job executions
(contract scenarios 1.12, 1.14, 1.16–1.18, 2.4, 2.5, 4.2): the port's behavioural
contract, on the Django adapter and the in-memory fake (``contract``); the
database's own constraints are the adapter's (``adapter``)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import (
    AbandonedInstance,
    CompletedInstance,
    ExecutionAlreadyActive,
    IllegalTransition,
    JobExecutionNotFound,
    JobInstanceNotFound,
    NameTooLong,
    StaleVersion,
    VersionAhead,
)
from tests.helpers import failure, key, launch, move

pytestmark = pytest.mark.contract
S = BatchStatus


def test_first_launch_creates_a_linked_instance_execution_step_graph(repo, clock):
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        execution = uow.create_job_execution(instance.id)
        step = uow.create_step_execution(execution.id, "import")
        uow.commit()
    assert execution.job_instance_id == instance.id
    assert step.job_execution_id == execution.id
    assert step.job_instance_id == instance.id
    assert (execution.status, execution.version, execution.attempt) == (S.STARTING, 0, 1)
    assert (step.status, step.version) == (S.STARTING, 0)
    assert execution.created_at == clock.now()
    assert execution.exit_code == "UNKNOWN"
    with repo.begin() as uow:
        assert uow.find_job_instance(key()) == instance
        assert uow.get_job_instance(instance.id) == instance
        assert uow.get_job_execution(execution.id) == execution
        assert uow.get_step_execution(step.id) == step
        assert uow.job_executions(instance.id) == [execution]
        assert uow.step_executions(execution.id) == [step]


def test_a_completed_instance_rejects_another_execution(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.COMPLETED, clock=clock)
    with repo.begin() as uow:
        selection = uow.select_or_create_job_instance(key())
        with pytest.raises(CompletedInstance) as error:
            uow.create_job_execution(selection.instance.id)
    assert selection.created is False
    assert error.value.id == execution.job_instance_id


def test_an_abandoned_instance_rejects_another_execution(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.STOPPED, S.ABANDONED, clock=clock)
    with repo.begin() as uow, pytest.raises(AbandonedInstance):
        uow.create_job_execution(execution.job_instance_id)


@pytest.mark.parametrize(
    "path",
    [(), (S.STARTED,), (S.STOPPING,), (S.UNKNOWN,), (S.STARTED, S.UNKNOWN)],
    ids=["STARTING", "STARTED", "STOPPING", "UNKNOWN", "STARTED-UNKNOWN"],
)
def test_an_unresolved_latest_execution_blocks_a_new_one(repo, clock, path):
    execution = move(repo, launch(repo), *path, clock=clock)
    with repo.begin() as uow, pytest.raises(ExecutionAlreadyActive) as error:
        uow.create_job_execution(execution.job_instance_id)
    assert error.value.execution_id == execution.id
    assert error.value.status is execution.status
    assert error.value.instance_id == execution.job_instance_id


@pytest.mark.parametrize("ending", [S.FAILED, S.STOPPED])
def test_a_failed_or_stopped_instance_restarts_as_a_new_distinct_attempt(repo, clock, ending):
    first = move(repo, launch(repo), S.STARTED, ending, clock=clock)
    clock.advance(timedelta(seconds=100))
    with repo.begin() as uow:
        second = uow.create_job_execution(first.job_instance_id)
        uow.commit()
    assert second.id != first.id
    assert (second.attempt, second.restart_of_id) == (2, first.id)
    assert (second.status, second.version) == (S.STARTING, 0)
    assert second.created_at == clock.now()
    with repo.begin() as uow:
        assert uow.job_executions(first.job_instance_id) == [first, second]


def test_attempts_count_up_across_restarts(repo, clock):
    execution = launch(repo)
    for expected_attempt in (2, 3, 4):
        move(repo, execution, S.STARTED, S.FAILED, clock=clock)
        with repo.begin() as uow:
            execution = uow.create_job_execution(execution.job_instance_id)
            uow.commit()
        assert execution.attempt == expected_attempt


def test_launching_a_missing_instance_is_not_found(repo):
    with repo.begin() as uow, pytest.raises(JobInstanceNotFound):
        uow.create_job_execution(424242)


def test_a_version_ahead_is_typed_and_leaves_the_row_unchanged_in_the_same_uow(repo):
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        execution = uow.create_job_execution(instance.id)
        with pytest.raises(VersionAhead) as error:
            uow.transition_job_execution(
                execution.id, 1, LifecycleTransition(S.FAILED, failure=failure())
            )
        assert (error.value.expected, error.value.actual) == (1, 0)
        assert uow.get_job_execution(execution.id) == execution


def test_ahead_and_illegal_transitions_are_rejected_then_a_valid_one_persists(repo, clock):
    execution = launch(repo)
    clock.advance(timedelta(seconds=1))
    with repo.begin() as uow:
        with pytest.raises(VersionAhead):
            uow.transition_job_execution(execution.id, 1, LifecycleTransition(S.STARTED))
        with pytest.raises(IllegalTransition) as illegal:
            uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.COMPLETED))
        started = uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    assert (illegal.value.from_status, illegal.value.to_status) == (S.STARTING, S.COMPLETED)
    assert (started.status, started.version, started.started_at) == (S.STARTED, 1, clock.now())
    with repo.begin() as uow:
        assert uow.get_job_execution(execution.id) == started


def test_transitions_stamp_the_repository_clock_and_keep_the_first_end_time(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, S.FAILED, clock=clock)
    failed_at = clock.now()
    abandoned = move(repo, execution, S.ABANDONED, clock=clock)
    assert execution.ended_at == failed_at
    assert abandoned.ended_at == failed_at
    assert abandoned.updated_at == clock.now()
    assert abandoned.failure == failure()
    with repo.begin() as uow:
        assert uow.get_job_execution(execution.id) == abandoned


def test_terminal_rollback_is_persisted(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        failed = uow.transition_job_execution(
            execution.id,
            execution.version,
            LifecycleTransition(S.FAILED, failure=failure(), terminal_rollback=True),
        )
        uow.commit()
    with repo.begin() as uow:
        stored = uow.get_job_execution(execution.id)
    assert stored.counts.rolled_back == failed.counts.rolled_back == 1


def test_exit_enrichment_changes_the_code_never_the_status(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    with repo.begin() as uow:
        enriched = uow.enrich_job_exit_status(execution.id, 1, "COMPLETED_WITH_WARNINGS")
        with pytest.raises(StaleVersion):
            uow.enrich_job_exit_status(execution.id, 1, "OTHER")
        uow.commit()
    assert (enriched.status, enriched.exit_code, enriched.version) == (
        S.STARTED,
        "COMPLETED_WITH_WARNINGS",
        2,
    )
    completed = move(repo, enriched, S.COMPLETED, clock=clock)
    assert completed.exit_code == "COMPLETED_WITH_WARNINGS"


def test_an_invalid_exit_code_is_refused(repo):
    execution = launch(repo)
    with repo.begin() as uow, pytest.raises(NameTooLong):
        uow.enrich_job_exit_status(execution.id, 0, "X" * 65)


def test_transitioning_a_missing_execution_is_not_found(repo):
    with repo.begin() as uow, pytest.raises(JobExecutionNotFound):
        uow.transition_job_execution(31337, 0, LifecycleTransition(S.STARTED))


@pytest.mark.adapter
class TestDatabaseConstraints:
    """The database itself refuses what the domain refuses (a raw ORM write)."""

    def _insert(self, instance_id: int, **overrides):
        now = models.JobInstance.objects.get(pk=instance_id).created_at
        existing = models.JobExecution.objects.filter(job_instance_id=instance_id).get(attempt=1)
        values = {
            "definition_id": existing.definition_id,
            "job_instance_id": instance_id,
            "job_name": "import_job",
            "attempt": 2,
            "status": "STARTING",
            "exit_code": "UNKNOWN",
            "created_at": now,
            "updated_at": now,
        }
        values.update(overrides)
        with transaction.atomic():
            models.JobExecution.objects.create(**values)

    def test_one_unresolved_execution_per_instance(self, repo):
        execution = launch(repo)
        with pytest.raises(IntegrityError):
            self._insert(execution.job_instance_id, status="UNKNOWN")

    @pytest.mark.parametrize(
        "overrides",
        [
            {"status": "RUNNING"},
            {"status": "COMPLETED"},  # finished without an end time
            {"status": "FAILED"},  # FAILED without a failure
            {"read_count": -1},
            {"version": -1},
            {"attempt": 0},
            {"exit_code": ""},
            {"failure_category": "USER_COMPONENT"},  # category without an id
        ],
        ids=lambda overrides: "-".join(f"{k}={v}" for k, v in overrides.items()),
    )
    def test_invalid_rows_are_refused(self, repo, overrides):
        instance_id = launch(repo).job_instance_id
        move(repo, launch_only_latest(repo, instance_id), S.STARTED, S.STOPPED)
        with pytest.raises(IntegrityError):
            self._insert(instance_id, **overrides)

    def test_a_valid_row_is_accepted(self, repo):
        instance_id = launch(repo).job_instance_id
        move(repo, launch_only_latest(repo, instance_id), S.STARTED, S.STOPPED)
        self._insert(instance_id)
        assert models.JobExecution.objects.filter(job_instance_id=instance_id).count() == 2


def launch_only_latest(repo, instance_id):
    with repo.begin() as uow:
        return uow.job_executions(instance_id)[-1]


@pytest.mark.parametrize(
    ("path", "target"),
    [((S.UNKNOWN,), S.FAILED), ((S.STARTED, S.FAILED), S.ABANDONED)],
    ids=["leave-UNKNOWN", "ABANDON"],
)
def test_a_runtime_transition_may_not_abandon_or_leave_unknown(repo, clock, path, target):
    execution = move(repo, launch(repo), *path, clock=clock)
    with repo.begin() as uow, pytest.raises(IllegalTransition):
        uow.transition_job_execution(
            execution.id,
            execution.version,
            LifecycleTransition(target, failure=failure()),
            by_runtime=True,
        )
    with repo.begin() as uow:  # an operator path (no runtime flag) may
        moved = uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(target, failure=failure())
        )
    assert moved.status is target
