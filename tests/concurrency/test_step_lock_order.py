"""One global lock order for step rows (docs/repository.md): a job execution,
then its step rows in id order, then partitions in key order. Recovery locks
the steps of an execution in id order; a partition's completion (and
assignment) locks its parent and its worker together in id order, then the
partition. Before, a partition operation locked the parent, the partition, then
the worker — which crosses recovery's order whenever the worker was created
before its parent (lower id): a deadlock, one side aborted with 40P01.

The interleaving is forced with a third session holding the partition row:
the completion takes its step locks and waits for the partition; the recovery
then waits behind it; the holder lets go. Under the old order the completion
held the parent and waited for the worker, which the recovery had locked."""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.errors import RecoveryEvidenceStale
from oxide_batch.domain.partitions import PartitionPlanEntry
from oxide_batch.domain.recovery import RecoveryDisposition
from oxide_batch.services.audit import Actor
from oxide_batch.services.bootstrap import operator_service
from tests.concurrency.support import admin_connection, run_in_threads, waiting_on_locks
from tests.faults.test_deadlock import deadlocks
from tests.helpers import key, launch, move

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]
S = BatchStatus


def worker_below_its_parent(repo, clock) -> dict[str, Any]:
    """A STARTED execution gone silent whose partition worker (COMPLETED) was
    created before the partitioned parent step, so its id is lower."""
    execution = move(repo, launch(repo, key(run="lock-order")), S.STARTED, clock=clock)
    with repo.begin() as uow:
        worker = uow.create_step_execution(execution.id, "worker-1")
        parent = uow.create_step_execution(execution.id, "manager")
        parent = uow.transition_step_execution(parent.id, 0, LifecycleTransition(S.STARTED))
        worker = uow.transition_step_execution(worker.id, 0, LifecycleTransition(S.STARTED))
        (partition,) = uow.create_step_partition_plan(parent.id, [PartitionPlanEntry("a")])
        uow.commit()
    with repo.begin() as uow:
        partition = uow.assign_step_partition(partition.id, 0, worker.id)
        worker = uow.transition_step_execution(
            worker.id, worker.version, LifecycleTransition(S.COMPLETED)
        )
        uow.commit()
    assert worker.id < parent.id
    clock.advance(timedelta(minutes=16))
    return {"execution": execution, "worker": worker, "parent": parent, "partition": partition}


def test_recovery_and_a_partition_completion_never_deadlock(repo, clock):
    world = worker_below_its_parent(repo, clock)
    service = operator_service(repo)
    proposal = service.propose(world["execution"].id)
    assert proposal.eligible
    holder = admin_connection()
    watcher = admin_connection()
    before = deadlocks(watcher)
    holder.execute("BEGIN")
    holder.execute(
        "SELECT 1 FROM ob_step_partition WHERE id = %s FOR UPDATE", (world["partition"].id,)
    )
    completion_waits = threading.Event()

    def complete(_: int) -> Any:
        with repo.begin() as uow:
            done = uow.complete_step_partition(
                world["partition"].id, world["partition"].version, world["worker"].id
            )
            uow.commit()
        return done

    def recover(_: int) -> Any:
        assert completion_waits.wait(10)
        try:
            return service.recover(
                world["execution"].id,
                expected_version=proposal.version,
                disposition=RecoveryDisposition.MARK_FAILED,
                reason_code="WORKER_LOST",
                evidence_digest=proposal.evidence_digest,
                actor=Actor("operator"),
                operation_id="lock-order",
            )
        except RecoveryEvidenceStale as error:  # the completion changed the evidence
            return error

    def release(_: int) -> None:
        assert waiting_on_locks(1), "the completion did not wait for the partition"
        completion_waits.set()
        assert waiting_on_locks(2), "the recovery did not wait behind the completion"
        holder.execute("COMMIT")

    try:
        outcomes = run_in_threads(3, lambda i: (complete, recover, release)[i](i), timeout=30)
    finally:
        holder.close()
    assert all(outcome.ok for outcome in outcomes), [o.error for o in outcomes]
    completed, recovered, _ = (outcome.value for outcome in outcomes)
    assert completed.status is S.COMPLETED
    # The recovery ran after the completion: it saw the completed partition.
    assert isinstance(recovered, RecoveryEvidenceStale)
    assert deadlocks(watcher) == before
    watcher.close()
    assert models.StepPartition.objects.get(pk=world["partition"].id).status == "COMPLETED"
