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

import dataclasses
import enum
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db.models import Q
from django.db.models.functions import Collate

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.conf import batch_settings
from oxide_batch.domain import events
from oxide_batch.domain.errors import (
    ConcurrentModification,
    PartitionParentNotActive,
    StepExecutionNotFound,
)
from oxide_batch.domain.evidence import instant_text, validate_owner_token
from oxide_batch.domain.execution import FailureSummary, StepExecution
from oxide_batch.domain.failure_detail import FailureDetail
from oxide_batch.domain.lifecycle import LifecycleTransition, compare_and_transition, next_version
from oxide_batch.domain.names import IdentifierKind
from oxide_batch.domain.partitions import StepPartition
from oxide_batch.domain.state import StateEnvelope
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.domain.worker import WorkerIdentity
from oxide_batch.repository import statements
from oxide_batch.repository.failure_details import insert_failure_detail
from oxide_batch.repository.partition_rows import CONTEXT_COLUMNS, PARTITION_COLUMNS, read_partition
from oxide_batch.repository.partitions import PartitionOperations
from oxide_batch.repository.records import (
    STEP_EXECUTION_COLUMNS,
    changed_columns,
    metadata_columns,
    step_execution_from_row,
)
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


class WorkerRecoveryOutcome(enum.StrEnum):
    RECOVERED = "recovered"  # this call's decision applied
    REPLAYED = "replayed"  # the worker step was recovered before: that decision
    SKIPPED = "skipped"  # not eligible (``detail`` says why): nothing written


@dataclass(frozen=True)
class WorkerRecoveryRecord:
    """One ``ob_worker_recovery`` row (decision 465)."""

    id: int
    job_instance_id: int
    job_execution_id: int
    step_execution_id: int
    worker_step_execution_id: int
    worker_step_version: int
    partition_id: int
    partition_key: str
    retries: int
    prior_status: BatchStatus
    reason_code: str
    actor: str
    evidence: dict[str, Any]
    parent_failed: bool
    decided_at: datetime


@dataclass(frozen=True)
class WorkerRecoveryResult:
    outcome: WorkerRecoveryOutcome
    record: WorkerRecoveryRecord | None = None
    detail: str | None = None


WORKER_RECOVERY_COLUMNS = tuple(f.name for f in WorkerRecoveryRecord.__dataclass_fields__.values())
#: What the worker recovery reads of the parent and the worker step, locked.
RECOVERY_STEP_COLUMNS = (
    *STEP_EXECUTION_COLUMNS,
    "owner_token",
    "lease_ttl",
    "claimed_partition_id",
    "job_execution__status",
    "job_execution__recovery_decision_id",
)
#: The exit code of a parent step failed by a partition over its retry limit.
RETRY_LIMIT_EXIT_CODE = "PARTITION_RETRY_LIMIT"


def worker_recovery_from_row(row: dict[str, Any]) -> WorkerRecoveryRecord:
    return WorkerRecoveryRecord(
        **{**row, "prior_status": S(row["prior_status"])},
    )


class WorkerRecoveryOperations(ClaimOperations):
    """``recover_partition_worker``: the watchdog's decision on one claimed
    worker whose lease expired (issue 43, decision 465)."""

    @operation
    def recover_partition_worker(
        self,
        worker_step_execution_id: int,
        *,
        actor: str,
        reason_code: str,
        failure_id: int,
    ) -> WorkerRecoveryResult:
        """Fail a claimed worker step whose lease expired and free its partition.

        Locks the parent and the worker step (one statement, id order — the
        global order), then the partition. Skipped (nothing written, ``detail``
        says why) unless the worker is a claimed worker still STARTING/STARTED
        under an active, unrecovered execution and a STARTED/STOPPING parent,
        with ``last_activity_at`` + its granted TTL at or before now. A worker
        already recovered replays that decision (one per worker step,
        ``ob_worker_recovery_once``, whichever watchdog asks). Otherwise, in this
        transaction: the worker step → FAILED (``STALE_RECOVERED``,
        ``failure_id``; its ``last_activity_at`` stays), which fences its token
        (every later write of it is refused); its partition → FAILED with the
        worker's counts, claimable again in the same attempt; a partition
        already retried ``OXIDE_BATCH_PARTITION_RETRY_LIMIT`` times fails the
        STARTED parent step instead (exit ``PARTITION_RETRY_LIMIT``, a failure
        detail saying so); and the audit row. ``StepExecutionNotFound``.
        """
        worker_id = self._id(STEP_EXECUTION, worker_step_execution_id)
        steps = models.StepExecution.objects.using(self._using)
        reference = steps.filter(pk=worker_id).values("claimed_partition_id").first()
        if reference is None:
            raise StepExecutionNotFound(id=worker_id)
        partition_id = reference["claimed_partition_id"]
        parent_id = (
            None
            if partition_id is None
            else self._partitions_by_id(partition_id)
            .values_list("step_execution_id", flat=True)
            .first()
        )
        if partition_id is None or parent_id is None:
            return WorkerRecoveryResult(
                WorkerRecoveryOutcome.SKIPPED, detail="not_a_claimed_worker"
            )
        locked = {
            row["id"]: row
            for row in steps.select_for_update(no_key=True, of=("self",))
            .filter(pk__in=(parent_id, worker_id))
            .order_by("id")
            .values(*RECOVERY_STEP_COLUMNS)
        }
        worker_row, parent_row = locked[worker_id], locked[parent_id]
        self._execution_in_hand = worker_row["job_execution_id"]
        done = (
            models.WorkerRecovery.objects.using(self._using)
            .filter(worker_step_execution_id=worker_id)
            .values(*WORKER_RECOVERY_COLUMNS)
            .first()
        )
        if done is not None:
            return WorkerRecoveryResult(
                WorkerRecoveryOutcome.REPLAYED, worker_recovery_from_row(done)
            )
        now = self.now()
        why = self._not_recoverable(worker_row, parent_row, now)
        if why is not None:
            return WorkerRecoveryResult(WorkerRecoveryOutcome.SKIPPED, detail=why)
        who = events.Actor("operator")
        worker = step_execution_from_row(worker_row)
        failed = self._fail_step(
            worker_row,
            worker,
            FailureSummary(FailureCategory.STALE_RECOVERED, failure_id),
            now,
            who,
        )
        row, partition = self._lock_partition(partition_id)
        parent_failed = False
        if partition.status is S.STARTED and partition.worker_step_execution_id == worker_id:
            freed = dataclasses.replace(
                partition,
                status=S.FAILED,
                exit_code=failed.exit_code,
                counts=failed.counts,
                version=next_version(partition.version),
            )
            self._write_partition(row, freed)
            self._record(events.PartitionCompleted(partition=freed, actor=who))
            limit = batch_settings.PARTITION_RETRY_LIMIT
            parent = step_execution_from_row(parent_row)
            if partition.retries >= limit and parent.status is S.STARTED:
                detail = FailureDetail(
                    type="PartitionRetryLimit",
                    message=(
                        f"partition {partition.key!r} lost its worker after {partition.retries} "
                        f"retries: over OXIDE_BATCH_PARTITION_RETRY_LIMIT ({limit})"
                    ),
                )
                summary = FailureSummary(FailureCategory.STALE_RECOVERED, failure_id, detail)
                self._fail_step(parent_row, parent, summary, now, who, RETRY_LIMIT_EXIT_CODE)
                parent_failed = True
        evidence = {
            "last_activity_at": instant_text(worker_row["last_activity_at"]),
            "lease_ttl_seconds": self._granted_ttl(worker_row).total_seconds(),
            "lease_expired_at": instant_text(self._lease_end(worker_row)),
            "worker_status": worker.status.value,
            "partition_status": partition.status.value,
            "worker": {
                member: worker_row[f"worker_{member}"]
                for member in ("host", "pid", "name", "client")
            },
        }
        values = {
            "job_instance_id": worker_row["job_instance_id"],
            "job_execution_id": worker_row["job_execution_id"],
            "step_execution_id": parent_id,
            "worker_step_execution_id": worker_id,
            "worker_step_version": failed.version,
            "partition_id": partition_id,
            "partition_key": partition.key,
            "retries": partition.retries,
            "prior_status": worker.status.value,
            "reason_code": reason_code,
            "actor": actor,
            "evidence": evidence,
            "parent_failed": parent_failed,
            "decided_at": now,
        }
        new_id = self._insert_unless_conflict(models.WorkerRecovery, values)
        if new_id is None:  # cannot happen under the worker's lock: fail closed
            raise ConcurrentModification()
        record = worker_recovery_from_row({"id": new_id, **values})
        return WorkerRecoveryResult(WorkerRecoveryOutcome.RECOVERED, record)

    def _partitions_by_id(self, partition_id: int) -> Any:
        return models.StepPartition.objects.using(self._using).filter(pk=partition_id)

    @staticmethod
    def _granted_ttl(row: dict[str, Any]) -> timedelta:
        ttl: timedelta | None = row["lease_ttl"]
        return batch_settings.LEASE_TTL if ttl is None else ttl

    def _lease_end(self, row: dict[str, Any]) -> datetime:
        activity: datetime = row["last_activity_at"] or row["updated_at"]
        return activity + self._granted_ttl(row)

    def _not_recoverable(
        self, worker: dict[str, Any], parent: dict[str, Any], now: datetime
    ) -> str | None:
        if worker["owner_token"] is None:
            return "not_a_claimed_worker"
        if S(worker["status"]) not in (S.STARTING, S.STARTED):
            return "not_running"
        if now < self._lease_end(worker):
            return "lease_not_expired"
        job_status = S(worker["job_execution__status"])
        if not job_status.is_active or worker["job_execution__recovery_decision_id"] is not None:
            return "execution_resolved"  # the execution's own recovery resolves its steps
        if S(parent["status"]) not in (S.STARTED, S.STOPPING):
            return "parent_not_active"
        return None

    def _fail_step(
        self,
        row: dict[str, Any],
        step: StepExecution,
        failure: FailureSummary,
        now: datetime,
        who: events.Actor,
        exit_code: str | None = None,
    ) -> StepExecution:
        """One step → FAILED by the lifecycle table (its ``last_activity_at``
        stays: a recovery is not the runtime's activity), with the failure's
        detail when it carries one."""
        metadata, version = compare_and_transition(
            step.metadata,
            step.version,
            step.version,
            LifecycleTransition(S.FAILED, failure=failure, at=now),
        )
        if exit_code is not None:
            metadata = dataclasses.replace(metadata, exit_code=exit_code)
        written = changed_columns(row, metadata_columns(metadata, version, now))
        self._update(models.StepExecution, step.id, written)
        if failure.detail is not None:
            insert_failure_detail(
                self._using,
                row,
                failure,
                job_execution_id=step.job_execution_id,
                step_execution_id=step.id,
                now=now,
            )
        failed = step.with_state(metadata, version, now)
        self._record(events.StepTransitioned(step=failed, prior=step.status, actor=who))
        return failed
