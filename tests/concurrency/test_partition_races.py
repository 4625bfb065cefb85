"""Partition races on PostgreSQL with real threads and separate connections.

Every partition mutation locks the parent step first, then the partition, then
the worker, so contenders queue on the parent and each one re-reads what the
previous one committed. Where the test needs a fixed interleaving, one
transaction holds its locks until the other is seen waiting in ``pg_locks``.
"""

from __future__ import annotations

import threading

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import (
    PartitionAggregationIncomplete,
    PartitionPlanExists,
    PartitionWorkerAlreadyAssigned,
    PartitionWorkerStale,
    StaleVersion,
)
from tests.concurrency.support import run_in_threads, waiting_on_locks
from tests.repository.test_partitions import (
    assign,
    complete,
    counts,
    entries,
    make_family,
    plan,
    read_plan,
    run_worker,
    step,
)

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus
CONTENDERS = 8


def wait_until_a_transaction_waits_for_a_lock(timeout: float = 20) -> None:
    """Block until another backend of the test database is waiting on a row lock."""
    assert waiting_on_locks(1, timeout), "no transaction waited for the lock"


def held_then_contended(repo, hold, contend, *, commit: bool):
    """Run ``hold(uow)`` in one transaction, ``contend()`` once it holds its locks; the
    holder commits (or rolls back) only after the contender is seen waiting."""
    held = threading.Event()

    def work(index: int):
        if index == 0:
            with repo.begin() as uow:
                result = hold(uow)
                held.set()
                wait_until_a_transaction_waits_for_a_lock()
                if commit:
                    uow.commit()
            return result
        assert held.wait(20)
        return contend()

    return run_in_threads(2, work)


def test_workers_assigning_one_partition_with_one_version_have_one_winner(repo, clock):
    names = [f"worker-{i}" for i in range(CONTENDERS)]
    family = make_family(repo, clock, *names)
    zeta = plan(repo, family.parent.id, "zeta")["zeta"]
    barrier = threading.Barrier(CONTENDERS)

    def contend(index: int):
        with repo.begin() as uow:
            barrier.wait()
            assigned = uow.assign_step_partition(zeta.id, 0, family.workers[names[index]].id)
            uow.commit()
        return assigned

    outcomes = run_in_threads(CONTENDERS, contend)
    winners = [outcome.value for outcome in outcomes if outcome.ok]
    losers = [outcome.error for outcome in outcomes if not outcome.ok]
    assert len(winners) == 1
    assert all(isinstance(error, StaleVersion) for error in losers), losers
    assert all((error.expected, error.actual) == (0, 1) for error in losers)
    (stored,) = read_plan(repo, family.parent.id)
    assert stored == winners[0]
    assert (stored.status, stored.version) == (S.STARTED, 1)


@pytest.mark.parametrize("observed", ["after", "before"])
def test_a_replaced_worker_cannot_complete_the_partition(repo, clock, observed):
    """The partition failed and is being re-assigned while its first worker, still
    alive, tries to complete it — with the version after or before the reassignment."""
    family = make_family(repo, clock, "first", "second")
    first, second = family.workers["first"].id, family.workers["second"].id
    zeta = assign(repo, plan(repo, family.parent.id, "zeta")["zeta"], first)
    run_worker(repo, clock, first, S.FAILED, "FAILED")
    failed = complete(repo, zeta, first)
    version = failed.version + 1 if observed == "after" else failed.version

    def zombie_completion():
        with repo.begin() as uow:
            return uow.complete_step_partition(zeta.id, version, first)

    holder, zombie = held_then_contended(
        repo,
        lambda uow: uow.assign_step_partition(zeta.id, failed.version, second),
        zombie_completion,
        commit=True,
    )
    assert holder.ok, holder.error
    if observed == "after":
        assert isinstance(zombie.error, PartitionWorkerStale), zombie.error
        assert zombie.error.worker_step_execution_id == first
    else:
        assert isinstance(zombie.error, StaleVersion), zombie.error
    (stored,) = read_plan(repo, family.parent.id)
    assert (stored.status, stored.worker_step_execution_id) == (S.STARTED, second)


@pytest.mark.parametrize("completion", ["rolled back", "committed"])
def test_aggregation_waits_for_a_completion_in_flight_and_sees_only_what_committed(
    repo, clock, completion
):
    family = make_family(repo, clock, "wa", "wb")
    partitions = plan(repo, family.parent.id, "a", "b")
    wa, wb = family.workers["wa"].id, family.workers["wb"].id
    a, b = assign(repo, partitions["a"], wa), assign(repo, partitions["b"], wb)
    run_worker(repo, clock, wa, S.COMPLETED, "A_DONE", counts(1))
    run_worker(repo, clock, wb, S.COMPLETED, "B_DONE", counts(2))
    complete(repo, a, wa)
    parent = step(repo, family.parent.id)

    def aggregation():
        with repo.begin() as uow:
            aggregated = uow.aggregate_step_partitions(parent.id, parent.version)
            uow.commit()
        return aggregated

    holder, aggregator = held_then_contended(
        repo,
        lambda uow: uow.complete_step_partition(b.id, b.version, wb),
        aggregation,
        commit=completion == "committed",
    )
    assert holder.ok, holder.error
    if completion == "rolled back":
        assert isinstance(aggregator.error, PartitionAggregationIncomplete), aggregator.error
        assert (aggregator.error.step_execution_id, aggregator.error.status) == (
            parent.id,
            S.STARTED,
        )
        assert step(repo, parent.id) == parent
    else:
        assert aggregator.ok, aggregator.error
        assert (aggregator.value.status, aggregator.value.counts) == (S.COMPLETED, counts(3))
        assert step(repo, parent.id) == aggregator.value


def test_aggregation_racing_the_last_completion_never_publishes_over_an_active_child(repo, clock):
    family = make_family(repo, clock, "wa", "wb")
    partitions = plan(repo, family.parent.id, "a", "b")
    wa, wb = family.workers["wa"].id, family.workers["wb"].id
    a, b = assign(repo, partitions["a"], wa), assign(repo, partitions["b"], wb)
    run_worker(repo, clock, wa, S.COMPLETED, "A_DONE", counts(1))
    run_worker(repo, clock, wb, S.FAILED, "B_FAILED", counts(2), failure_id=77)
    complete(repo, a, wa)
    parent = step(repo, family.parent.id)
    barrier = threading.Barrier(2)

    def contend(index: int):
        with repo.begin() as uow:
            barrier.wait()
            if index == 0:
                result = uow.complete_step_partition(b.id, b.version, wb)
            else:
                result = uow.aggregate_step_partitions(parent.id, parent.version)
            uow.commit()
        return result

    completion, aggregation = run_in_threads(2, contend)
    assert completion.ok, completion.error
    stored = step(repo, parent.id)
    if aggregation.ok:
        assert stored == aggregation.value
        assert (stored.status, stored.exit_code, stored.counts) == (S.FAILED, "B_FAILED", counts(3))
    else:
        assert isinstance(aggregation.error, PartitionAggregationIncomplete), aggregation.error
        assert stored == parent


def test_concurrent_aggregations_with_one_version_all_return_the_one_committed_parent(repo, clock):
    family = make_family(repo, clock, "wa")
    wa = family.workers["wa"].id
    a = assign(repo, plan(repo, family.parent.id, "a")["a"], wa)
    run_worker(repo, clock, wa, S.COMPLETED, "A_DONE", counts(5))
    complete(repo, a, wa)
    barrier = threading.Barrier(CONTENDERS)

    def contend(_: int):
        with repo.begin() as uow:
            barrier.wait()
            aggregated = uow.aggregate_step_partitions(family.parent.id, family.parent.version)
            uow.commit()
        return aggregated

    outcomes = run_in_threads(CONTENDERS, contend)
    assert all(outcome.ok for outcome in outcomes), [outcome.error for outcome in outcomes]
    stored = step(repo, family.parent.id)
    assert all(outcome.value == stored for outcome in outcomes)
    assert (stored.status, stored.version) == (S.COMPLETED, family.parent.version + 1)


def test_concurrent_plans_for_one_parent_have_one_winner(repo, clock):
    family = make_family(repo, clock)
    barrier = threading.Barrier(CONTENDERS)

    def contend(index: int):
        with repo.begin() as uow:
            barrier.wait()
            created = uow.create_step_partition_plan(family.parent.id, entries(f"k{index}", "x"))
            uow.commit()
        return created

    outcomes = run_in_threads(CONTENDERS, contend)
    winners = [outcome.value for outcome in outcomes if outcome.ok]
    assert len(winners) == 1
    assert all(isinstance(o.error, PartitionPlanExists) for o in outcomes if not o.ok)
    assert models.StepPartition.objects.filter(step_execution_id=family.parent.id).count() == 2


def test_one_worker_assigned_concurrently_under_two_parents_serves_one_partition(repo, clock):
    """Two parents of one job execution lock different rows until the shared worker."""
    family = make_family(repo, clock, "shared")
    with repo.begin() as uow:
        other = uow.create_step_execution(family.execution.id, "other-partitioned")
        other = uow.transition_step_execution(other.id, 0, LifecycleTransition(S.STARTED))
        uow.commit()
    partitions = [
        plan(repo, family.parent.id, "a")["a"],
        plan(repo, other.id, "a")["a"],
    ]
    shared = family.workers["shared"].id
    barrier = threading.Barrier(2)

    def contend(index: int):
        with repo.begin() as uow:
            barrier.wait()
            assigned = uow.assign_step_partition(partitions[index].id, 0, shared)
            uow.commit()
        return assigned

    outcomes = run_in_threads(2, contend)
    assert sum(outcome.ok for outcome in outcomes) == 1
    (loser,) = [outcome.error for outcome in outcomes if not outcome.ok]
    assert isinstance(loser, PartitionWorkerAlreadyAssigned), loser
    assert models.StepPartition.objects.filter(worker_step_execution_id=shared).count() == 1


def test_concurrent_restarts_into_one_target_carry_the_plan_once(repo, clock):
    family = make_family(repo, clock)
    plan(repo, family.parent.id, "a", "b")
    with repo.begin() as uow:
        execution = uow.get_job_execution(family.execution.id)
        uow.transition_job_execution(
            execution.id, execution.version, LifecycleTransition(S.STOPPED)
        )
        uow.commit()
    with repo.begin() as uow:
        attempt = uow.create_job_execution(family.execution.job_instance_id)
        attempt = uow.transition_job_execution(attempt.id, 0, LifecycleTransition(S.STARTED))
        target = uow.create_step_execution(attempt.id, "partitioned")
        uow.commit()
    barrier = threading.Barrier(CONTENDERS)

    def contend(_: int):
        with repo.begin() as uow:
            barrier.wait()
            carried = uow.restart_step_partition_plan(family.parent.id, target.id)
            uow.commit()
        return carried

    outcomes = run_in_threads(CONTENDERS, contend)
    assert sum(outcome.ok for outcome in outcomes) == 1
    assert all(isinstance(o.error, PartitionPlanExists) for o in outcomes if not o.ok)
    assert [p.key for p in read_plan(repo, target.id)] == ["a", "b"]
