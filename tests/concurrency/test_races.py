"""Races on PostgreSQL with real threads and separate connections.

Each contender opens its unit of work, waits at a barrier so all transactions
are open at once, then acts: exactly one may win, every other gets a typed
error, and the database holds exactly one result.
"""

from __future__ import annotations

import threading

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition, RecoveryRequest
from oxide_batch.domain.errors import ExecutionAlreadyActive, StaleVersion
from tests.concurrency.support import run_in_threads
from tests.helpers import key, launch, move

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
CONTENDERS = 16
S = BatchStatus


def test_16_concurrent_transitions_with_one_expected_version_have_one_winner(repo):
    execution = launch(repo)
    barrier = threading.Barrier(CONTENDERS)

    def contend(_: int):
        with repo.begin() as uow:
            barrier.wait()
            result = uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.STARTED))
            uow.commit()
        return result

    outcomes = run_in_threads(CONTENDERS, contend)
    winners = [outcome for outcome in outcomes if outcome.ok]
    losers = [outcome.error for outcome in outcomes if not outcome.ok]
    assert len(winners) == 1
    assert len(losers) == CONTENDERS - 1
    assert all(isinstance(error, StaleVersion) for error in losers), losers
    assert all((error.expected, error.actual) == (0, 1) for error in losers)
    row = models.JobExecution.objects.get(pk=execution.id)
    assert (row.status, row.version) == ("STARTED", 1)


def test_16_concurrent_selections_of_one_key_create_one_instance(repo):
    barrier = threading.Barrier(CONTENDERS)

    def contend(_: int):
        with repo.begin() as uow:
            barrier.wait()
            selection = uow.select_or_create_job_instance(key())
            uow.commit()
        return selection

    outcomes = run_in_threads(CONTENDERS, contend)
    assert all(outcome.ok for outcome in outcomes), [o.error for o in outcomes]
    selections = [outcome.value for outcome in outcomes]
    assert sum(selection.created for selection in selections) == 1
    assert len({selection.instance.id for selection in selections}) == 1
    assert models.JobInstance.objects.count() == 1


def test_16_concurrent_launches_of_one_instance_create_one_execution(repo):
    with repo.begin() as uow:
        instance = uow.select_or_create_job_instance(key()).instance
        uow.commit()
    barrier = threading.Barrier(CONTENDERS)

    def contend(_: int):
        with repo.begin() as uow:
            barrier.wait()
            execution = uow.create_job_execution(instance.id)
            uow.commit()
        return execution

    outcomes = run_in_threads(CONTENDERS, contend)
    winners = [outcome.value for outcome in outcomes if outcome.ok]
    losers = [outcome.error for outcome in outcomes if not outcome.ok]
    assert len(winners) == 1
    assert all(isinstance(error, ExecutionAlreadyActive) for error in losers), losers
    assert all(error.execution_id == winners[0].id for error in losers)
    assert models.JobExecution.objects.filter(job_instance_id=instance.id).count() == 1


def test_concurrent_first_launches_of_one_key_leave_one_instance_and_one_execution(repo):
    barrier = threading.Barrier(8)

    def contend(_: int):
        with repo.begin() as uow:
            barrier.wait()
            instance = uow.select_or_create_job_instance(key()).instance
            execution = uow.create_job_execution(instance.id)
            uow.commit()
        return execution

    outcomes = run_in_threads(8, contend)
    assert sum(outcome.ok for outcome in outcomes) == 1
    assert all(
        isinstance(outcome.error, ExecutionAlreadyActive) for outcome in outcomes if not outcome.ok
    )
    assert models.JobInstance.objects.count() == 1
    assert models.JobExecution.objects.count() == 1


def test_concurrent_fused_launches_of_one_key_leave_one_claimed_started_attempt(repo):
    """contract §4.2: launches of one key at once, each with its own owner token
    (the instance new to all of them): one wins — its attempt STARTED, claimed
    for its token — and every other is ``ExecutionAlreadyActive``, leaving
    neither a second instance nor a half-made attempt."""
    barrier = threading.Barrier(8)

    def contend(index: int):
        with repo.begin() as uow:
            barrier.wait()
            launched = uow.launch_job_execution(key(), bytes([index + 1]) * 16)
            uow.commit()
        return launched

    outcomes = run_in_threads(8, contend)
    winners = [outcome.value for outcome in outcomes if outcome.ok]
    losers = [outcome.error for outcome in outcomes if not outcome.ok]
    assert len(winners) == 1
    assert all(isinstance(error, ExecutionAlreadyActive) for error in losers), losers
    assert models.JobInstance.objects.count() == 1
    [row] = models.JobExecution.objects.all()
    assert (row.status, row.version, row.attempt) == ("STARTED", 1, 1)
    assert row.owner_token is not None


def test_2_concurrent_recoveries_of_one_execution_leave_one_decision(repo, clock):
    execution = move(repo, launch(repo), S.STARTED, clock=clock)
    barrier = threading.Barrier(2)

    def contend(index: int):
        request = RecoveryRequest.abandon(
            expected_version=1,
            reason_code="ORPHAN_CONFIRMED",
            operator_reference=f"operator-{index}",
            evidence_digest=bytes([index]) * 32,
        )
        with repo.begin() as uow:
            barrier.wait()
            result = uow.recover_job_execution(execution.id, request)
            uow.commit()
        return result

    outcomes = run_in_threads(2, contend)
    assert sum(outcome.ok for outcome in outcomes) == 1
    assert [type(o.error) for o in outcomes if not o.ok] == [StaleVersion]
    assert models.RecoveryDecision.objects.filter(job_execution_id=execution.id).count() == 1
    assert models.JobExecution.objects.get(pk=execution.id).version == 2


def test_uncommitted_work_is_invisible_to_other_connections(repo):
    created = threading.Event()
    checked = threading.Event()

    def writer(_: int):
        with repo.begin() as uow:
            uow.select_or_create_job_instance(key())
            created.set()
            checked.wait(10)
            uow.rollback()

    def reader():
        created.wait(10)
        with repo.begin() as uow:
            seen = uow.find_job_instance(key())
        checked.set()
        return seen

    outcomes = run_in_threads(2, lambda index: writer(index) if index == 0 else reader())
    assert outcomes[0].ok, outcomes[0].error
    assert outcomes[1].ok, outcomes[1].error
    assert outcomes[1].value is None
