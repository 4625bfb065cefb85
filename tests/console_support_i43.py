"""A partitioned step run by claimed remote workers (issue 43), recorded as of
now for the console's tests: partition ``a`` lost its first worker (recovered
by the watchdog) and runs on its second; ``b`` runs on its first; ``c`` is not
claimed yet."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from oxide_batch import models
from oxide_batch.domain import BatchStatus, LifecycleTransition
from oxide_batch.domain.partitions import PartitionPlanEntry
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.repository import DjangoJobRepository
from tests.helpers import key, launch

S = BatchStatus


@dataclass(frozen=True)
class RemoteRun:
    parent_id: int
    lost_worker_id: int
    workers: tuple[int, ...]


def remote_run(run: str = "remote", *, extra_partitions: int = 0) -> RemoteRun:
    repo = DjangoJobRepository()
    execution = launch(repo, key("remote_partitions", run=run))
    with repo.begin() as uow:
        uow.claim_execution_owner(execution.id, 0, b"\x05" * 16)
        uow.transition_job_execution(execution.id, 0, LifecycleTransition(S.STARTED))
        parent = uow.create_step_execution(execution.id, "fan", started=True)
        keys = ["a", "b", "c", *(f"x{i:02}" for i in range(extra_partitions))]
        uow.create_step_partition_plan(parent.id, [PartitionPlanEntry(k, None) for k in keys])
        uow.commit()

    def claim(token: bytes, host: str, pid: int):
        with repo.begin(owner_token=token) as uow:
            claimed = uow.claim_step_partition(
                parent.id, token, worker=WorkerIdentity(host=host, pid=pid)
            )
            uow.commit()
        assert claimed.worker_step is not None
        return claimed.worker_step.id

    lost = claim(b"\x0a" * 16, "worker-1", 1001)
    # Its lease ran out an hour ago: the watchdog recovers it.
    activity = models.StepExecution.objects.get(pk=lost).last_activity_at
    assert activity is not None
    long_ago = activity - timedelta(hours=1)
    models.StepExecution.objects.filter(pk=lost).update(last_activity_at=long_ago)
    with repo.begin() as uow:
        uow.recover_partition_worker(
            lost, actor="watchdog@console", reason_code="LEASE_EXPIRED", failure_id=77
        )
        uow.commit()
    second = claim(b"\x0b" * 16, "worker-2", 2002)  # partition a again
    third = claim(b"\x0c" * 16, "worker-3", 3003)  # partition b
    more = tuple(
        claim(bytes([16 + i]) * 16, f"worker-x{i}", 4000 + i) for i in range(extra_partitions)
    )
    return RemoteRun(parent.id, lost, (second, third, *more))
