"""A partitioned step's plan, its workers and the aggregate in the fake (the
port's ``Partitions``), in the adapter's order of checks."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from oxide_batch.domain.errors import (
    EmptyPartitionPlan,
    InvalidState,
    NotRestartable,
    OxideBatchError,
    PartitionAggregationIncomplete,
    PartitionParentNotActive,
    PartitionPlanExists,
    PartitionPlanNotCommitted,
    PartitionRestartMismatch,
    PartitionStateCorrupt,
    PartitionUpdateNotAllowed,
    PartitionWorkerAlreadyAssigned,
    PartitionWorkerMismatch,
    PartitionWorkerStale,
    RestartStateNotFound,
    StepPartitionNotFound,
)
from oxide_batch.domain.execution import UNKNOWN_EXIT_CODE, ExecutionCounts, StepExecution
from oxide_batch.domain.lifecycle import (
    LifecycleTransition,
    compare_and_transition,
    next_version,
    validate_expected_version,
)
from oxide_batch.domain.names import IdentifierKind, validate_identifier
from oxide_batch.domain.partitions import (
    RETRYABLE,
    RUNTIME_TERMINAL,
    PartitionAggregate,
    PartitionPlanEntry,
    StepPartition,
    aggregate_partitions,
    key_bytes,
    validate_plan,
)
from oxide_batch.domain.recovery import refuse_fenced
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.partition_rows import StepPartitionWithContext, partition_context
from tests.fakes.base import STEP_EXECUTION, UnitOfWorkBase
from tests.fakes.tables import PartitionRow, by_id

S = BatchStatus
STEP_PARTITION = IdentifierKind.STEP_PARTITION
PLAN_PARENT_STATUSES = frozenset({S.STARTING, S.STARTED})
COMPLETION_PARENT_STATUSES = frozenset({S.STARTED, S.STOPPING})
RESTARTABLE_JOB_STATUSES = frozenset({S.STOPPED, S.FAILED})


class PartitionOperations(UnitOfWorkBase):
    """A partitioned step's plan, its workers and the aggregate in the fake."""

    # -- Partitions -----------------------------------------------------------------

    def create_step_partition_plan(
        self, step_execution_id: int, entries: Sequence[PartitionPlanEntry]
    ) -> list[StepPartition]:
        parent_id = validate_identifier(STEP_EXECUTION, step_execution_id)
        entries = list(entries)
        validate_plan(entries)
        contexts = [partition_context(entry.context) for entry in entries]
        parent = self._claimed_step(parent_id)
        if parent.status not in PLAN_PARENT_STATUSES:
            raise PartitionParentNotActive(step_execution_id=parent_id, status=parent.status)
        job = self._open().executions[parent.job_execution_id].execution
        if not job.status.is_active:
            # A step left running under a finished (or recovered) execution starts no new work.
            raise InvalidState(id=job.id, status=job.status)
        if self._plan_rows(parent_id):
            raise PartitionPlanExists(step_execution_id=parent_id)
        plan: list[StepPartition] = []
        for ordinal, (entry, stored) in enumerate(zip(entries, contexts, strict=True), 1):
            partition = StepPartitionWithContext(
                id=self._repository.next_id("partitions"),
                job_instance_id=parent.job_instance_id,
                step_execution_id=parent_id,
                key=entry.key,
                ordinal=ordinal,
                status=S.STARTING,
                exit_code=UNKNOWN_EXIT_CODE,
                counts=ExecutionCounts(),
                version=0,
                worker_step_execution_id=None,
                context=entry.context,
            )
            self._open().partitions[partition.id] = PartitionRow(partition, stored)
            plan.append(partition)
        self._plans_created.add(parent_id)
        return plan

    def step_partition_plan(self, step_execution_id: int) -> list[StepPartition]:
        parent_id = validate_identifier(STEP_EXECUTION, step_execution_id)
        plan = sorted(
            (row.partition for row in self._plan_rows(parent_id)), key=lambda p: key_bytes(p.key)
        )
        if not plan:
            self._found(self._open().steps, STEP_EXECUTION, parent_id)
        return plan

    def assign_step_partition(
        self, partition_id: int, expected_version: int, worker_step_execution_id: int
    ) -> StepPartition:
        pk = validate_identifier(STEP_PARTITION, partition_id)
        worker_id = validate_identifier(STEP_EXECUTION, worker_step_execution_id)
        partition, parent, worker = self._partition_parent_worker(pk, worker_id)
        if parent.id in self._plans_created:
            raise PartitionPlanNotCommitted(step_execution_id=parent.id)
        if parent.status is not S.STARTED:
            raise PartitionParentNotActive(step_execution_id=parent.id, status=parent.status)
        validate_expected_version(expected_version, partition.version)
        first_run = partition.status is S.STARTING and partition.worker_step_execution_id is None
        if not first_run and partition.status not in RETRYABLE:
            raise PartitionUpdateNotAllowed(id=pk, status=partition.status)
        worker = (
            self._found(self._open().steps, STEP_EXECUTION, worker_id) if worker is None else worker
        )
        if worker_id == parent.id or worker.job_execution_id != parent.job_execution_id:
            raise PartitionWorkerMismatch(partition_id=pk, worker_step_execution_id=worker_id)
        if any(
            row.partition.worker_step_execution_id == worker_id and row.partition.id != pk
            for row in self._open().partitions.values()
        ):
            raise PartitionWorkerAlreadyAssigned(worker_step_execution_id=worker_id)
        return self._write_partition(
            dataclasses.replace(
                partition,
                worker_step_execution_id=worker_id,
                status=S.STARTED,
                exit_code=UNKNOWN_EXIT_CODE,
                counts=ExecutionCounts(),
            )
        )

    def complete_step_partition(
        self, partition_id: int, expected_version: int, worker_step_execution_id: int
    ) -> StepPartition:
        pk = validate_identifier(STEP_PARTITION, partition_id)
        worker_id = validate_identifier(STEP_EXECUTION, worker_step_execution_id)
        partition, parent, worker = self._partition_parent_worker(pk, worker_id)
        if parent.status not in COMPLETION_PARENT_STATUSES:
            raise PartitionParentNotActive(step_execution_id=parent.id, status=parent.status)
        validate_expected_version(expected_version, partition.version)
        if partition.status is not S.STARTED:
            raise PartitionUpdateNotAllowed(id=pk, status=partition.status)
        if partition.worker_step_execution_id != worker_id:
            raise PartitionWorkerStale(partition_id=pk, worker_step_execution_id=worker_id)
        worker = (
            self._found(self._open().steps, STEP_EXECUTION, worker_id) if worker is None else worker
        )
        if worker.job_execution_id != parent.job_execution_id:
            raise PartitionWorkerMismatch(partition_id=pk, worker_step_execution_id=worker_id)
        if worker.status not in RUNTIME_TERMINAL:
            raise PartitionAggregationIncomplete(step_execution_id=parent.id, status=worker.status)
        return self._write_partition(
            dataclasses.replace(
                partition, status=worker.status, exit_code=worker.exit_code, counts=worker.counts
            )
        )

    def aggregate_step_partitions(
        self, step_execution_id: int, expected_version: int
    ) -> StepExecution:
        parent = self._claimed_step(validate_identifier(STEP_EXECUTION, step_execution_id))
        refuse_fenced(parent, expected_version)  # a recovered parent takes no aggregate
        partitions = [row.partition for row in self._plan_rows(parent.id)]
        if parent.version != expected_version:
            if self._already_aggregated(parent, expected_version, partitions):
                return parent
            validate_expected_version(expected_version, parent.version)
        if parent.status not in COMPLETION_PARENT_STATUSES:
            raise PartitionParentNotActive(step_execution_id=parent.id, status=parent.status)
        aggregate = self._aggregate(parent.id, partitions)
        worker = self._open().steps.get(aggregate.selected_worker_step_execution_id)
        now = self.now()
        metadata, version = compare_and_transition(
            parent.metadata,
            parent.version,
            expected_version,
            LifecycleTransition(
                aggregate.status, failure=None if worker is None else worker.failure
            ).stamped(now),
        )
        metadata = dataclasses.replace(
            metadata, exit_code=aggregate.exit_code, counts=aggregate.counts
        )
        # The runtime's aggregation is the parent's activity (contract §2.5.3).
        step = dataclasses.replace(parent.with_state(metadata, version, now), last_activity_at=now)
        self._open().steps[step.id] = step
        return step

    def restart_step_partition_plan(
        self, source_step_execution_id: int | None, target_step_execution_id: int
    ) -> list[StepPartition]:
        target_id = validate_identifier(STEP_EXECUTION, target_step_execution_id)
        if source_step_execution_id is None:
            source_id = self._earlier_step_of_node(target_id)
        else:
            source_id = validate_identifier(STEP_EXECUTION, source_step_execution_id)
        steps = self._open().steps
        source = self._found(steps, STEP_EXECUTION, source_id)
        target = self._claimed_step(target_id)
        if (source.node_id, source.job_instance_id) != (target.node_id, target.job_instance_id):
            raise PartitionRestartMismatch(
                source_step_execution_id=source_id, target_step_execution_id=target_id
            )
        job = self._open().executions[source.job_execution_id].execution
        if job.status not in RESTARTABLE_JOB_STATUSES:
            # A plan is carried from a finished attempt only, as a new attempt is made.
            raise NotRestartable(status=job.status)
        if target.status not in PLAN_PARENT_STATUSES:
            raise PartitionParentNotActive(step_execution_id=target_id, status=target.status)
        if self._plan_rows(target_id):
            raise PartitionPlanExists(step_execution_id=target_id)
        rows = sorted(self._plan_rows(source_id), key=lambda row: row.partition.ordinal)
        if not rows:
            # Nothing to carry (the attempt stopped before planning): the runtime plans anew.
            raise RestartStateNotFound(
                execution_id=target.job_execution_id, step_name=target.step_name
            )
        plan: list[StepPartition] = []
        for row in rows:
            carried = dataclasses.replace(
                row.partition,
                id=self._repository.next_id("partitions"),
                job_instance_id=target.job_instance_id,
                step_execution_id=target_id,
                version=0,
            )
            if carried.status is not S.COMPLETED:
                # Every partition but a COMPLETED one runs again, from the start.
                carried = dataclasses.replace(
                    carried,
                    worker_step_execution_id=None,
                    status=S.STARTING,
                    exit_code=UNKNOWN_EXIT_CODE,
                    counts=ExecutionCounts(),
                )
            self._open().partitions[carried.id] = PartitionRow(carried, row.context)
            plan.append(carried)
        self._plans_created.add(target_id)
        return plan

    # -- helpers --------------------------------------------------------------------

    def _plan_rows(self, parent_id: int) -> list[PartitionRow]:
        rows = self._open().partitions.values()
        return [row for row in rows if row.partition.step_execution_id == parent_id]

    def _claimed_step(self, step_id: int) -> StepExecution:
        """A step a write works under: found, its execution in hand and its claimant checked."""
        step = self._step(step_id)
        self._check_claimant(self._execution(step.job_execution_id))
        return step

    def _partition_parent_worker(
        self, pk: int, worker_id: int
    ) -> tuple[StepPartition, StepExecution, StepExecution | None]:
        row = self._open().partitions.get(pk)
        if row is None:
            raise StepPartitionNotFound(id=pk)
        parent = self._claimed_step(row.partition.step_execution_id)
        return row.partition, parent, self._open().steps.get(worker_id)

    def _write_partition(self, changed: StepPartition) -> StepPartition:
        """Store ``changed`` at the next version."""
        written = dataclasses.replace(changed, version=next_version(changed.version))
        partitions = self._open().partitions
        partitions[written.id] = dataclasses.replace(partitions[written.id], partition=written)
        return written

    def _earlier_step_of_node(self, target_id: int) -> int:
        target = self._found(self._open().steps, STEP_EXECUTION, target_id)
        earlier = [
            s
            for s in self._open().steps.values()
            if (s.job_instance_id, s.node_id) == (target.job_instance_id, target.node_id)
            and s.job_execution_id != target.job_execution_id
        ]
        if not earlier:
            raise RestartStateNotFound(
                execution_id=target.job_execution_id, step_name=target.step_name
            )
        return max(earlier, key=by_id).id

    @staticmethod
    def _aggregate(parent_id: int, partitions: list[StepPartition]) -> PartitionAggregate:
        try:
            return aggregate_partitions(parent_id, partitions)
        except EmptyPartitionPlan:
            # Aggregating a step without a plan: durable state is not what the runtime expects.
            raise PartitionStateCorrupt() from None

    @staticmethod
    def _already_aggregated(
        parent: StepExecution, expected_version: int, partitions: list[StepPartition]
    ) -> bool:
        """Whether this aggregation already applied (an idempotent retry)."""
        if parent.version != expected_version + 1 or parent.status.is_active:
            return False
        try:
            aggregate = aggregate_partitions(parent.id, partitions)
        except OxideBatchError:
            return False
        return (aggregate.status, aggregate.exit_code, aggregate.counts) == (
            parent.status,
            parent.exit_code,
            parent.counts,
        )
