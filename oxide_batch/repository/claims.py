"""Remote partition claiming in the Django adapter (issue 43, contract §2.4.6).

A worker process on any host asks for the next partition of a running
partitioned step with its own owner token. One unit of work, in the global lock
order (docs/repository.md): the parent step read ``FOR SHARE`` (claimants share
it; an aggregation or a recovery waits for them and they for it), then the
first claimable partition in key byte order ``FOR NO KEY UPDATE SKIP LOCKED``
(claimants skip each other's partition instead of queueing behind it), then
the new worker step (an INSERT: nobody else can hold it) and the assignment's
own rules and write (``PartitionOperations._assign_worker``). On SQLite the
transaction's ``BEGIN IMMEDIATE`` serializes claimants: there are no row locks
to skip (decision 460).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.db.models.functions import Collate

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import PartitionParentNotActive, StepExecutionNotFound
from oxide_batch.domain.evidence import validate_owner_token
from oxide_batch.domain.execution import StepExecution
from oxide_batch.domain.names import IdentifierKind
from oxide_batch.domain.partitions import StepPartition
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.repository import statements
from oxide_batch.repository.partition_rows import CONTEXT_COLUMNS, PARTITION_COLUMNS, read_partition
from oxide_batch.repository.partitions import PartitionOperations
from oxide_batch.repository.records import STEP_EXECUTION_COLUMNS, step_execution_from_row
from oxide_batch.repository.steps import TAKEOVER_COLUMNS, StepOperations
from oxide_batch.repository.unit_of_work import operation

S = BatchStatus
STEP_EXECUTION = IdentifierKind.STEP_EXECUTION
#: The worker statuses whose state a retry takes over (a restart's rule).
TAKEN_OVER = frozenset({S.FAILED, S.STOPPED})


class NothingClaimed(enum.StrEnum):
    """Why a claim assigned nothing (an answer, not an error)."""

    FINISHED = "finished"  # nothing is left to run: the worker loop ends
    ALL_ASSIGNED = "all_assigned"  # every partition left has a live worker: ask again later
    STOPPING = "stopping"  # a stop was requested: the worker loop ends


@dataclass(frozen=True)
class PartitionClaim:
    """A claim's outcome: the partition and its new worker step (with what it
    took over and its lease), or why nothing was claimed (``reason``)."""

    parent: StepExecution
    partition: StepPartition | None = None
    worker_step: StepExecution | None = None
    checkpoint: StateEnvelope | None = None
    context: StateEnvelope | None = None
    lease_ttl: timedelta | None = None
    lease_expires_at: datetime | None = None
    reason: NothingClaimed | None = None

    @property
    def claimed(self) -> bool:
        return self.partition is not None


def worker_step_name(parent_name: str, ordinal: int, retries: int) -> str:
    """``<parent>:<ordinal>`` for a partition's first worker (the local pool's
    name too), ``<parent>:<ordinal>#<n>`` for its n-th (decision 461): step names
    are unique per execution and a retry is a new row."""
    base = f"{parent_name}:{ordinal}"
    return base if retries == 0 else f"{base}#{retries + 1}"


def claimable(limit: int) -> Q:
    """A partition a claim may take: never assigned, or failed with retries left."""
    return Q(status=S.STARTING.value, worker_step_execution_id__isnull=True) | Q(
        status=S.FAILED.value, retries__lt=limit
    )


class ClaimOperations(StepOperations, PartitionOperations):
    """``claim_step_partition``: the remote worker's one request for work."""

    @operation
    def claim_step_partition(
        self,
        step_execution_id: int,
        owner_token: bytes,
        *,
        worker: WorkerIdentity | None = None,
    ) -> PartitionClaim:
        """Assign the next claimable partition of a STARTED partitioned step to
        a new STARTED worker step owned by ``owner_token`` (16 bytes,
        ``InvalidCharacters`` otherwise, before any query).

        Claimable, in partition-key byte order: unassigned STARTING, or FAILED
        with fewer than ``OXIDE_BATCH_PARTITION_RETRY_LIMIT`` retries (a retry:
        ``retries`` + 1, and the worker step takes over the failed worker's
        counts, checkpoint and context, verified). A partition's first worker in
        a restart attempt takes over the earlier attempt's worker of the same
        key when it FAILED or STOPPED. The worker step is named by
        :func:`worker_step_name`, carries ``worker``, the token, the granted
        lease TTL and the partition's id; the claimant user must be the
        execution's (``ExecutionOwned``). Nothing to claim is an answer:
        ``STOPPING`` (a stop was requested, or the execution or the parent is
        STOPPING), ``FINISHED`` (the parent or its execution is no longer
        active, or no partition is left to run), ``ALL_ASSIGNED`` (the rest is
        running, or held by another claimant right now). Raises
        ``StepExecutionNotFound``; ``PartitionParentNotActive`` for a STARTING
        parent.
        """
        token = validate_owner_token(owner_token)
        parent_id = self._id(STEP_EXECUTION, step_execution_id)
        statement = statements.share_claim_parent(self._connection, STEP_EXECUTION_COLUMNS)
        row = self._run(statement, parent_id)
        if row is None:
            raise StepExecutionNotFound(id=parent_id)
        execution_id = row["job_execution_id"]
        self._execution_in_hand = execution_id
        self._check_claimant(execution_id, row["job_execution__owner_user_id"])
        # The claimant's answer compares its own token (decision 462).
        self._remember_control(
            execution_id,
            token,
            row["job_execution__stop_requested_at"],
            row["job_execution__recovery_decision_id"],
        )
        parent = step_execution_from_row(row)
        stopped = self._not_running(row, parent)
        if stopped is not None:
            return PartitionClaim(parent, reason=stopped)
        limit = batch_settings.PARTITION_RETRY_LIMIT
        found = self._next_claimable(parent_id, limit)
        if found is None:
            return PartitionClaim(parent, reason=self._why_nothing(parent_id, limit))
        partition_row, partition = found
        retry = partition.status is S.FAILED
        retries = partition.retries + 1 if retry else partition.retries
        source = self._takeover_source(row, partition, retry)
        name = worker_step_name(parent.step_name, partition.ordinal, retries)
        ttl = batch_settings.LEASE_TTL
        step = self._insert_step(
            execution_id,
            {"job_instance_id": row["job_instance_id"]},
            name,
            name,
            source,
            started=True,
            worker=worker,
            owned={"owner_token": token, "lease_ttl": ttl, "claimed_partition_id": partition.id},
        )
        assigned = self._assign_worker(
            row,
            {"job_execution_id": execution_id},
            step.id,
            partition_row,
            partition,
            partition.version,
            retries=retries,
        )
        state = self.created_step_state(step.id)
        assert state is not None
        return PartitionClaim(
            parent,
            partition=assigned,
            worker_step=step,
            checkpoint=state.checkpoint,
            context=state.context,
            lease_ttl=ttl,
            lease_expires_at=step.updated_at + ttl,
        )

    @staticmethod
    def _not_running(row: dict[str, Any], parent: StepExecution) -> NothingClaimed | None:
        """Why no partition of this parent may be claimed now, from the read row."""
        job_status = S(row["job_execution__status"])
        if (
            row["job_execution__stop_requested_at"] is not None
            or job_status is S.STOPPING
            or parent.status is S.STOPPING
        ):
            return NothingClaimed.STOPPING
        if (
            not job_status.is_active
            or row["job_execution__recovery_decision_id"] is not None
            or parent.status not in (S.STARTING, S.STARTED)
        ):
            return NothingClaimed.FINISHED
        if parent.status is not S.STARTED:
            raise PartitionParentNotActive(step_execution_id=parent.id, status=parent.status)
        return None

    def _next_claimable(
        self, parent_id: int, limit: int
    ) -> tuple[dict[str, Any], StepPartition] | None:
        """The first claimable partition in key byte order, locked; one another
        claimant holds is skipped (PostgreSQL's ``SKIP LOCKED``)."""
        by_key: Collate | str = (
            Collate("partition_key", "C")
            if self._connection.vendor == "postgresql"
            else "partition_key"
        )
        row = (
            self._partitions_of(parent_id)
            .filter(claimable(limit))
            .select_for_update(no_key=True, skip_locked=True)
            .order_by(by_key)
            .values(*PARTITION_COLUMNS, *CONTEXT_COLUMNS)
            .first()
        )
        return None if row is None else (row, read_partition(row))

    def _why_nothing(self, parent_id: int, limit: int) -> NothingClaimed:
        """``ALL_ASSIGNED`` while a partition still runs or may run (another
        claimant holds it), else ``FINISHED`` (a plain read)."""
        live = Q(status=S.STARTED.value) | claimable(limit)
        if self._partitions_of(parent_id).filter(live).exists():
            return NothingClaimed.ALL_ASSIGNED
        # No plan yet: the manager is about to create it.
        if not self._partitions_of(parent_id).exists():
            return NothingClaimed.ALL_ASSIGNED
        return NothingClaimed.FINISHED

    def _takeover_source(
        self, parent: dict[str, Any], partition: StepPartition, retry: bool
    ) -> dict[str, Any] | None:
        """The worker row whose counts, checkpoint and context the new worker
        takes over: the failed worker of a retry; for a partition's first
        worker in a restart attempt, the earlier attempt's worker of the same
        key when it FAILED or STOPPED; else none (a fresh start)."""
        steps = models.StepExecution.objects.using(self._using)
        if retry:
            worker_id = partition.worker_step_execution_id
        elif parent["job_execution__restart_of_id"] is not None:
            worker_id = (
                models.StepPartition.objects.using(self._using)
                .filter(
                    job_instance_id=partition.job_instance_id,
                    partition_key=partition.key,
                    step_execution__node_id=parent["node_id"],
                    worker_step_execution_id__isnull=False,
                )
                .exclude(step_execution__job_execution_id=parent["job_execution_id"])
                .order_by("-id")
                .values_list("worker_step_execution_id", flat=True)
                .first()
            )
        else:
            return None
        if worker_id is None:
            return None
        source: dict[str, Any] | None = (
            steps.filter(pk=worker_id).values("id", "status", *TAKEOVER_COLUMNS).first()
        )
        if source is None or S(source["status"]) not in TAKEN_OVER:
            return None
        return source
