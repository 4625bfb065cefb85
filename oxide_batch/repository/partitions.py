"""Step partitions in the Django adapter (contract §2.4).

Every partition mutation takes its locks in the global order
(docs/repository.md) — job execution, step rows in id order (a parent and its
worker in one statement), partitions in key byte order — each with one
``FOR NO KEY UPDATE`` read, then one write. A plan's rows are inserted by
one multi-row ``INSERT … RETURNING`` whatever their number (Django's
``bulk_create`` splits into batches of ~60 rows on SQLite), so creating,
reading, restarting and aggregating a plan costs the same number of
statements for 1 partition as for 1024.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from django.db.models import Q, QuerySet, Subquery
from django.db.models.functions import Collate

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain import events
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
    StepExecutionNotFound,
    StepPartitionNotFound,
)
from oxide_batch.domain.execution import (
    UNKNOWN_EXIT_CODE,
    ExecutionCounts,
    FailureSummary,
    StepExecution,
)
from oxide_batch.domain.lifecycle import (
    LifecycleTransition,
    compare_and_transition,
    next_version,
    validate_expected_version,
)
from oxide_batch.domain.names import IdentifierKind
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
from oxide_batch.domain.state import (
    EnvelopeKind,
)
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.repository.partition_rows import (
    CONTEXT_COLUMNS,
    COUNT_COLUMNS,
    PARTITION_COLUMNS,
    STEP_LOCK_COLUMNS,
    carried_context,
    counts_columns,
    insert_partitions,
    new_row,
    partition_context,
    partition_from_row,
    read_partition,
)
from oxide_batch.repository.records import (
    STEP_EXECUTION_COLUMNS,
    Row,
    changed_columns,
    metadata_columns,
    step_execution_from_row,
)
from oxide_batch.repository.unit_of_work import UnitOfWorkBase, operation

S = BatchStatus
STEP_EXECUTION = IdentifierKind.STEP_EXECUTION
STEP_PARTITION = IdentifierKind.STEP_PARTITION
PARTITION_CONTEXT = EnvelopeKind.PARTITION_CONTEXT
PLAN_PARENT_STATUSES = frozenset({S.STARTING, S.STARTED})
COMPLETION_PARENT_STATUSES = frozenset({S.STARTED, S.STOPPING})
RESTARTABLE_JOB_STATUSES = frozenset({S.STOPPED, S.FAILED})


# The execution's columns a write under it checks and answers with, joined
# into a step's row (``UnitOfWorkBase._claimed_by``).
JOINED = "job_execution__"
EXECUTION_CONTROL = tuple(
    JOINED + column
    for column in ("owner_user_id", "owner_token", "stop_requested_at", "recovery_decision_id")
)


class PartitionOperations(UnitOfWorkBase):
    """Partition plans, worker assignment, completion, aggregation and restart.

    Each write first refuses a runtime user other than the claimant of the job
    execution it writes under (``ExecutionOwned``, contract §2.5.2), read with the
    rows it locks."""

    # Parents whose plan this unit of work created: assignment waits for the commit.
    _partition_plans_created: set[int]

    @operation
    def create_step_partition_plan(
        self, step_execution_id: int, entries: Sequence[PartitionPlanEntry]
    ) -> list[StepPartition]:
        """Create the whole plan of a STARTING or STARTED parent step, in entry order.

        Validates before any statement (``EmptyPartitionPlan``,
        ``PartitionPlanTooLarge``, ``DuplicatePartitionKey`` by key bytes,
        ``InvalidEnvelope`` for a context above 4 KiB), then locks the parent
        (``FOR NO KEY UPDATE``, read with its job execution's status):
        ``StepExecutionNotFound``, ``PartitionParentNotActive``, ``InvalidState``
        when the job execution is not STARTING/STARTED/STOPPING,
        ``PartitionPlanExists``. Every partition
        is STARTING, unassigned, exit ``UNKNOWN``, counts 0, version 0, ordinal
        = 1-based entry position; one INSERT writes them all or none. Workers
        cannot be assigned until this unit of work commits.
        """
        parent_id = self._id(STEP_EXECUTION, step_execution_id)
        entries = list(entries)
        validate_plan(entries)
        contexts = [partition_context(entry.context) for entry in entries]
        parent = (
            models.StepExecution.objects.using(self._using)
            .select_for_update(no_key=True, of=("self",))
            .filter(pk=parent_id)
            .values(
                "status",
                "job_instance_id",
                "job_execution_id",
                "job_execution__status",
                *EXECUTION_CONTROL,
            )
            .first()
        )
        if parent is None:
            raise StepExecutionNotFound(id=parent_id)
        self._claimed_by(parent["job_execution_id"], parent, JOINED)
        status = BatchStatus(parent["status"])
        if status not in PLAN_PARENT_STATUSES:
            raise PartitionParentNotActive(step_execution_id=parent_id, status=status)
        job_status = BatchStatus(parent["job_execution__status"])
        if not job_status.is_active:
            # A step left running under a finished (or recovered) execution
            # starts no new work.
            raise InvalidState(id=parent["job_execution_id"], status=job_status)
        if self._partitions_of(parent_id).exists():
            raise PartitionPlanExists(step_execution_id=parent_id)
        rows = [
            new_row(parent["job_instance_id"], parent_id, entry.key, ordinal, stored)
            for ordinal, (entry, stored) in enumerate(zip(entries, contexts, strict=True), 1)
        ]
        ids = insert_partitions(self._connection, rows)
        self._plans_created_here().add(parent_id)
        plan = [
            partition_from_row({**row, "id": ids[row["ordinal"]]}, entry.context)
            for row, entry in zip(rows, entries, strict=True)
        ]
        self._record(
            events.PartitionPlanCreated(
                step_execution_id=parent_id, partitions=tuple(plan), actor=self._actor
            )
        )
        return plan

    @operation
    def step_partition_plan(self, step_execution_id: int) -> list[StepPartition]:
        """The parent's plan in partition-key byte order (empty when it has none).

        One read, no lock. Every stored context is verified
        (``PartitionStateCorrupt``); ``StepExecutionNotFound`` for a missing
        parent (checked only when there are no partitions).
        """
        parent_id = self._id(STEP_EXECUTION, step_execution_id)
        rows = self._partitions_of(parent_id).values(*PARTITION_COLUMNS, *CONTEXT_COLUMNS)
        plan = sorted((read_partition(row) for row in rows), key=lambda p: key_bytes(p.key))
        if not plan and self._read_row(models.StepExecution, parent_id, ("id",)) is None:
            raise StepExecutionNotFound(id=parent_id)
        return plan

    @operation
    def assign_step_partition(
        self, partition_id: int, expected_version: int, worker_step_execution_id: int
    ) -> StepPartition:
        """Bind a worker step to a partition: STARTED, exit ``UNKNOWN``, counts 0, version + 1.

        Locks the parent and worker steps (id order), then the partition. Raises
        ``StepPartitionNotFound``; ``PartitionPlanNotCommitted`` when this unit
        of work created the plan; ``PartitionParentNotActive`` unless the parent
        is STARTED; ``StaleVersion``; ``PartitionUpdateNotAllowed`` unless the
        partition is STARTING (first run) or FAILED/STOPPED (retry);
        ``StepExecutionNotFound`` for the worker; ``PartitionWorkerMismatch``
        when the worker is the parent or in another job execution;
        ``PartitionWorkerAlreadyAssigned`` when it serves another partition.
        """
        pk = self._id(STEP_PARTITION, partition_id)
        worker_id = self._id(STEP_EXECUTION, worker_step_execution_id)
        parent, worker = self._lock_parent_and_worker(pk, worker_id)
        self._claimed_by(parent["job_execution_id"], parent, JOINED)
        if parent["id"] in self._plans_created_here():
            raise PartitionPlanNotCommitted(step_execution_id=parent["id"])
        self._require_parent(parent, frozenset({S.STARTED}))
        row, partition = self._lock_partition(pk)
        return self._assign_worker(parent, worker, worker_id, row, partition, expected_version)

    def _assign_worker(
        self,
        parent: Row,
        worker: Row | None,
        worker_id: int,
        row: Row,
        partition: StepPartition,
        expected_version: int,
        *,
        retries: int | None = None,
    ) -> StepPartition:
        """The assignment's rules and write, once its rows are locked (the
        assign operation's, and the claim's — issue 43 — with the partition's
        new ``retries``)."""
        pk = partition.id
        validate_expected_version(expected_version, partition.version)
        first_run = partition.status is S.STARTING and partition.worker_step_execution_id is None
        if not first_run and partition.status not in RETRYABLE:
            raise PartitionUpdateNotAllowed(id=pk, status=partition.status)
        if worker is None:
            raise StepExecutionNotFound(id=worker_id)
        if worker_id == parent["id"] or worker["job_execution_id"] != parent["job_execution_id"]:
            raise PartitionWorkerMismatch(partition_id=pk, worker_step_execution_id=worker_id)
        serving = models.StepPartition.objects.using(self._using).filter(
            worker_step_execution_id=worker_id
        )
        if serving.exclude(pk=pk).exists():
            raise PartitionWorkerAlreadyAssigned(worker_step_execution_id=worker_id)
        assigned = dataclasses.replace(
            partition,
            worker_step_execution_id=worker_id,
            status=S.STARTED,
            exit_code=UNKNOWN_EXIT_CODE,
            counts=ExecutionCounts(),
            version=next_version(partition.version),
            retries=partition.retries if retries is None else retries,
        )
        self._write_partition(row, assigned)
        self._record(events.PartitionAssigned(partition=assigned, actor=self._actor))
        return assigned

    @operation
    def complete_step_partition(
        self, partition_id: int, expected_version: int, worker_step_execution_id: int
    ) -> StepPartition:
        """Record a partition's outcome, copied from its worker row; version + 1.

        Status, exit code and counts come from the worker step, never from the
        caller. Locks the parent and worker steps (id order), then the partition. Raises
        ``StepPartitionNotFound``; ``PartitionParentNotActive`` unless the
        parent is STARTED or STOPPING; ``StaleVersion``;
        ``PartitionUpdateNotAllowed`` unless the partition is STARTED;
        ``PartitionWorkerStale`` when the named worker is not the assigned one;
        ``PartitionAggregationIncomplete`` (with the worker's status) until the
        worker is COMPLETED, FAILED, STOPPED or UNKNOWN.
        """
        pk = self._id(STEP_PARTITION, partition_id)
        worker_id = self._id(STEP_EXECUTION, worker_step_execution_id)
        parent, worker = self._lock_parent_and_worker(pk, worker_id)
        if worker is not None and worker["owner_token"] is not None:
            # A claimed worker ends its own partition with its own token (decision 462).
            self._claimed_by(
                parent["job_execution_id"],
                {**parent, f"{JOINED}owner_token": worker["owner_token"]},
                JOINED,
            )
        else:
            self._claimed_by(parent["job_execution_id"], parent, JOINED)
        self._require_parent(parent, COMPLETION_PARENT_STATUSES)
        row, partition = self._lock_partition(pk)
        validate_expected_version(expected_version, partition.version)
        if partition.status is not S.STARTED:
            raise PartitionUpdateNotAllowed(id=pk, status=partition.status)
        if partition.worker_step_execution_id != worker_id:
            raise PartitionWorkerStale(partition_id=pk, worker_step_execution_id=worker_id)
        if worker is None:
            raise StepExecutionNotFound(id=worker_id)
        if worker["job_execution_id"] != parent["job_execution_id"]:
            raise PartitionWorkerMismatch(partition_id=pk, worker_step_execution_id=worker_id)
        worker_status = BatchStatus(worker["status"])
        if worker_status not in RUNTIME_TERMINAL:
            raise PartitionAggregationIncomplete(
                step_execution_id=parent["id"], status=worker_status
            )
        completed = dataclasses.replace(
            partition,
            status=worker_status,
            exit_code=worker["exit_code"],
            counts=ExecutionCounts(*(worker[column] for column in COUNT_COLUMNS)),
            version=next_version(partition.version),
        )
        self._write_partition(row, completed)
        self._record(events.PartitionCompleted(partition=completed, actor=self._actor))
        return completed

    @operation
    def aggregate_step_partitions(
        self, step_execution_id: int, expected_version: int
    ) -> StepExecution:
        """Move the parent to its partitions' aggregate, in this transaction.

        Locks the parent, then every partition in key byte order (one
        statement), and reads the selected worker's failure. The parent takes the most severe
        status (COMPLETED < STOPPED < FAILED < UNKNOWN) through the lifecycle
        table, the exit code and failure of the first partition in key order
        with that status, and the summed counts; version + 1. Repeating an
        aggregation that already applied (parent at ``expected_version + 1``,
        no longer active, holding the same aggregate) returns the parent
        unchanged. Raises ``StepExecutionNotFound``; ``StaleVersion``;
        ``PartitionParentNotActive`` unless the parent is STARTED or STOPPING;
        ``PartitionStateCorrupt`` for a parent without a plan;
        ``PartitionAggregationIncomplete`` (parent unchanged);
        ``CountExhausted``; lifecycle errors (STOPPING cannot become COMPLETED).
        """
        parent_id = self._id(STEP_EXECUTION, step_execution_id)
        row = self._lock_step(parent_id, STEP_EXECUTION_COLUMNS)
        if row is None:
            raise StepExecutionNotFound(id=parent_id)
        self._claimed_by(row["job_execution_id"], row, JOINED)
        parent = step_execution_from_row(row)
        refuse_fenced(parent, expected_version)  # a recovered parent takes no aggregate
        partitions = [partition_from_row(p) for p in self._lock_plan_in_key_order(parent_id)]
        if parent.version != expected_version:
            if self._already_aggregated(parent, expected_version, partitions):
                return parent
            validate_expected_version(expected_version, parent.version)
        if parent.status not in COMPLETION_PARENT_STATUSES:
            raise PartitionParentNotActive(step_execution_id=parent_id, status=parent.status)
        aggregate = self._aggregate(parent_id, partitions)
        failure = self._worker_failure(aggregate.selected_worker_step_execution_id)
        now = self.now()
        metadata, version = compare_and_transition(
            parent.metadata,
            parent.version,
            expected_version,
            LifecycleTransition(aggregate.status, failure=failure).stamped(now),
        )
        metadata = dataclasses.replace(
            metadata, exit_code=aggregate.exit_code, counts=aggregate.counts
        )
        # The runtime's aggregation is the parent's activity (contract §2.5.3).
        written = {**metadata_columns(metadata, version, now), "last_activity_at": now}
        self._update(models.StepExecution, parent_id, changed_columns(row, written))
        step = dataclasses.replace(parent.with_state(metadata, version, now), last_activity_at=now)
        self._record(events.StepTransitioned(step=step, prior=parent.status, actor=self._actor))
        return step

    @operation
    def restart_step_partition_plan(
        self, source_step_execution_id: int | None, target_step_execution_id: int
    ) -> list[StepPartition]:
        """Carry a failed or stopped attempt's plan over to the restarted step, in ordinal order.

        ``source_step_execution_id`` ``None``: the server's own answer — the newest
        step of the same node and job instance in an earlier attempt (the step a
        restarted step takes its state over from); none → ``RestartStateNotFound``
        (two indexed reads before the locks below).

        Locks the source's job execution, then both steps (one statement, id
        order). Same key, ordinal and context (verified, copied as stored);
        COMPLETED partitions keep their worker, exit code and counts and are not
        rerun; every other one (UNKNOWN included) becomes unassigned STARTING
        with exit ``UNKNOWN`` and counts 0; version 0; one INSERT, whole plan or
        nothing. Raises, in this order: ``StepExecutionNotFound``;
        ``PartitionRestartMismatch`` when the steps are of different nodes or
        job instances (input: it can never succeed); ``NotRestartable`` (with
        its status) when the source job execution is not STOPPED/FAILED;
        ``PartitionParentNotActive`` when the target step is not
        STARTING/STARTED; ``PartitionPlanExists``; ``RestartStateNotFound``
        when the source step has no plan; ``PartitionStateCorrupt`` for a
        source row whose status, worker, ordinal or counts contradict each
        other; ``FaultStateCorrupt`` for a source context that does not verify
        (contract §2.4.5). Like a new plan, it must commit before workers are assigned.
        """
        target_id = self._id(STEP_EXECUTION, target_step_execution_id)
        if source_step_execution_id is None:
            source_id = self._earlier_step_of_node(target_id)
        else:
            source_id = self._id(STEP_EXECUTION, source_step_execution_id)
        source_job = self._lock_job_execution_of(source_id)
        steps = self._lock_steps(source_id, target_id)
        source, target = steps[source_id], steps[target_id]
        self._claimed_by(target["job_execution_id"], target, JOINED)
        if (source["node_id"], source["job_instance_id"]) != (
            target["node_id"],
            target["job_instance_id"],
        ):
            raise PartitionRestartMismatch(
                source_step_execution_id=source_id, target_step_execution_id=target_id
            )
        job_status = BatchStatus(source_job["status"])
        if job_status not in RESTARTABLE_JOB_STATUSES:
            # A plan is carried from a finished attempt only, as a new attempt is made.
            raise NotRestartable(status=job_status)
        target_status = BatchStatus(target["status"])
        if target_status not in PLAN_PARENT_STATUSES:
            raise PartitionParentNotActive(step_execution_id=target_id, status=target_status)
        rows = list(
            models.StepPartition.objects.using(self._using)
            .filter(step_execution_id__in=(source_id, target_id))
            .order_by("step_execution_id", "ordinal")
            .values(*PARTITION_COLUMNS, *CONTEXT_COLUMNS)
        )
        if any(row["step_execution_id"] == target_id for row in rows):
            raise PartitionPlanExists(step_execution_id=target_id)
        if not rows:
            # Nothing to carry (the attempt stopped before planning): the runtime plans anew.
            raise RestartStateNotFound(
                execution_id=target["job_execution_id"], step_name=target["step_name"]
            )
        new_rows = [self._carried_row(row, target["job_instance_id"], target_id) for row in rows]
        ids = insert_partitions(self._connection, new_rows)
        self._plans_created_here().add(target_id)
        plan = [read_partition({**row, "id": ids[row["ordinal"]]}) for row in new_rows]
        self._record(
            events.PartitionPlanRestarted(
                step_execution_id=target_id, partitions=tuple(plan), actor=self._actor
            )
        )
        return plan

    # -- helpers -------------------------------------------------------------------

    def _earlier_step_of_node(self, target_id: int) -> int:
        """The newest step of ``target_id``'s node and instance in another (earlier)
        attempt, on the ``ob_step_node`` index. ``StepExecutionNotFound`` for the
        target; ``RestartStateNotFound`` when no earlier attempt ran the node."""
        steps = models.StepExecution.objects.using(self._using)
        target = (
            steps.filter(pk=target_id)
            .values("job_instance_id", "job_execution_id", "node_id", "step_name")
            .first()
        )
        if target is None:
            raise StepExecutionNotFound(id=target_id)
        source: int | None = (
            steps.filter(job_instance_id=target["job_instance_id"], node_id=target["node_id"])
            .exclude(job_execution_id=target["job_execution_id"])
            .order_by("-id")
            .values_list("id", flat=True)
            .first()
        )
        if source is None:
            raise RestartStateNotFound(
                execution_id=target["job_execution_id"], step_name=target["step_name"]
            )
        return source

    def _plans_created_here(self) -> set[int]:
        created: set[int] | None = getattr(self, "_partition_plans_created", None)
        if created is None:
            created = self._partition_plans_created = set()
        return created

    def _partitions_of(self, parent_id: int) -> QuerySet[models.StepPartition]:
        return models.StepPartition.objects.using(self._using).filter(step_execution_id=parent_id)

    def _lock_parent_and_worker(self, partition_id: int, worker_id: int) -> tuple[Row, Row | None]:
        """Find a partition's parent step and lock it with the worker step in one
        statement, in id order — the global order of step rows, which recovery
        follows too (a worker created before its parent has the lower id).
        ``StepPartitionNotFound``; the worker is ``None`` when it does not exist."""
        parent_of = Subquery(
            models.StepPartition.objects.using(self._using)
            .filter(pk=partition_id)
            .values("step_execution_id")[:1]
        )
        rows = (
            models.StepExecution.objects.using(self._using)
            .select_for_update(no_key=True, of=("self",))
            .filter(Q(pk=parent_of) | Q(pk=worker_id))
            .annotate(parent_of=parent_of)
            .order_by("id")
            .values(*STEP_LOCK_COLUMNS, "parent_of", *EXECUTION_CONTROL)
        )
        parent = worker = None
        for row in rows:
            if row["id"] == row["parent_of"]:
                parent = row
            if row["id"] == worker_id:
                worker = row
        if parent is None:
            raise StepPartitionNotFound(id=partition_id)
        self._execution_in_hand = parent["job_execution_id"]
        return parent, worker

    @staticmethod
    def _require_parent(parent: Row, allowed: frozenset[BatchStatus]) -> None:
        status = BatchStatus(parent["status"])
        if status not in allowed:
            raise PartitionParentNotActive(step_execution_id=parent["id"], status=status)

    def _lock_partition(self, pk: int) -> tuple[Row, StepPartition]:
        row = self._lock_row(models.StepPartition, pk, (*PARTITION_COLUMNS, *CONTEXT_COLUMNS))
        if row is None:
            raise StepPartitionNotFound(id=pk)
        return row, read_partition(row)

    def _write_partition(self, row: Row, partition: StepPartition) -> None:
        """One UPDATE of the columns that changed (the version always does)."""
        after = {
            "worker_step_execution_id": partition.worker_step_execution_id,
            "status": partition.status.value,
            "exit_code": partition.exit_code,
            "version": partition.version,
            **counts_columns(partition.counts),
            "retries": partition.retries,
        }
        self._update(models.StepPartition, partition.id, changed_columns(row, after))

    def _lock_plan_in_key_order(self, parent_id: int) -> list[Row]:
        """Lock every partition of the plan in key byte order, in one statement.

        PostgreSQL's default collation is not byte order, so the lock order
        uses ``COLLATE "C"`` there; SQLite's BINARY collation already is.
        """
        by_key: Collate | str = (
            Collate("partition_key", "C")
            if self._connection.vendor == "postgresql"
            else "partition_key"
        )
        return list(
            self._partitions_of(parent_id)
            .select_for_update(no_key=True)
            .order_by(by_key)
            .values(*PARTITION_COLUMNS)
        )

    def _aggregate(self, parent_id: int, partitions: list[StepPartition]) -> PartitionAggregate:
        try:
            return aggregate_partitions(parent_id, partitions)
        except EmptyPartitionPlan:
            # Aggregating a step without a plan: durable state is not what the runtime expects.
            raise PartitionStateCorrupt() from None

    def _already_aggregated(
        self, parent: StepExecution, expected_version: int, partitions: list[StepPartition]
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

    def _worker_failure(self, worker_id: int) -> FailureSummary | None:
        """The selected worker's failure summary — a plain read: a step row is
        never locked after partition rows (the global lock order), and a failure
        once set is carried forward by every later transition."""
        row = self._read_row(models.StepExecution, worker_id, ("failure_category", "failure_id"))
        if row is None or row["failure_category"] is None:
            return None
        return FailureSummary(FailureCategory(row["failure_category"]), row["failure_id"])

    def _lock_job_execution_of(self, step_id: int) -> Row:
        step_of = (
            models.StepExecution.objects.using(self._using)
            .filter(pk=step_id)
            .values("job_execution_id")[:1]
        )
        job = (
            models.JobExecution.objects.using(self._using)
            .select_for_update(no_key=True)
            .filter(pk=Subquery(step_of))
            .values("id", "status")
            .first()
        )
        if job is None:
            raise StepExecutionNotFound(id=step_id)
        return job

    def _lock_steps(self, *step_ids: int) -> dict[int, Row]:
        rows = (
            models.StepExecution.objects.using(self._using)
            .select_for_update(no_key=True, of=("self",))
            .filter(pk__in=step_ids)
            .order_by("id")
            .values(
                "id",
                "status",
                "node_id",
                "job_instance_id",
                "job_execution_id",
                "step_name",
                *EXECUTION_CONTROL,
            )
        )
        found: dict[int, Row] = {row["id"]: row for row in rows}
        for step_id in step_ids:
            if step_id not in found:
                raise StepExecutionNotFound(id=step_id)
        return found

    def _carried_row(self, source: Row, job_instance_id: int, target_id: int) -> Row:
        partition = partition_from_row(source)
        stored = carried_context(source)
        carried = partition if partition.status is S.COMPLETED else None
        return new_row(
            job_instance_id, target_id, partition.key, partition.ordinal, stored, carried
        )
