"""Step executions in the Django adapter."""

from __future__ import annotations

from oxide_batch import models
from oxide_batch.domain.errors import (
    InvalidState,
    JobExecutionNotFound,
    StepExecutionExists,
    StepExecutionNotFound,
)
from oxide_batch.domain.execution import ExecutionMetadata, StepExecution
from oxide_batch.domain.identifiers import IdentifierKind
from oxide_batch.domain.lifecycle import (
    LifecycleTransition,
    compare_and_enrich,
    compare_and_transition,
)
from oxide_batch.domain.names import NameKind, validate_name
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.records import (
    STEP_EXECUTION_COLUMNS,
    metadata_columns,
    step_execution_from_row,
)
from oxide_batch.repository.unit_of_work import UnitOfWorkBase, operation

JOB_EXECUTION = IdentifierKind.JOB_EXECUTION
STEP_EXECUTION = IdentifierKind.STEP_EXECUTION
STEP_PARENT_STATUSES = frozenset({BatchStatus.STARTING, BatchStatus.STARTED})


class StepOperations(UnitOfWorkBase):
    """Creation, lifecycle CAS and reads of step executions."""

    @operation
    def create_step_execution(
        self, job_execution_id: int, step_name: str, *, node_id: str | None = None
    ) -> StepExecution:
        """A STARTING step (version 0) under a STARTING or STARTED job execution.

        Locks the job execution (``FOR NO KEY UPDATE``: it is not changed, but
        its status must not move underneath). Raises ``InvalidState`` for any
        other parent status and ``StepExecutionExists`` for a repeated name.
        ``node_id`` defaults to the step name.
        """
        validate_name(step_name, NameKind.STEP)
        node = validate_name(node_id if node_id is not None else step_name, NameKind.NODE)
        parent_id = self._id(JOB_EXECUTION, job_execution_id)
        parent = self._lock_row(models.JobExecution, parent_id, ("job_instance_id", "status"))
        if parent is None:
            raise JobExecutionNotFound(id=parent_id)
        parent_status = BatchStatus(parent["status"])
        if parent_status not in STEP_PARENT_STATUSES:
            raise InvalidState(id=parent_id, status=parent_status)
        now = self.now()
        metadata = ExecutionMetadata.starting(now)
        new_id = self._insert_unless_conflict(
            models.StepExecution,
            {
                "job_instance": parent["job_instance_id"],
                "job_execution": parent_id,
                "step_name": step_name,
                "node_id": node,
                **metadata_columns(metadata, 0, now),
            },
            ("job_execution", "step_name"),
        )
        if new_id is None:
            raise StepExecutionExists(job_execution_id=parent_id, step_name=step_name)
        return StepExecution(
            id=new_id,
            metadata=metadata,
            version=0,
            updated_at=now,
            job_instance_id=parent["job_instance_id"],
            job_execution_id=parent_id,
            step_name=step_name,
            node_id=node,
        )

    @operation
    def get_step_execution(self, step_execution_id: int) -> StepExecution:
        pk = self._id(STEP_EXECUTION, step_execution_id)
        row = self._read_row(models.StepExecution, pk, STEP_EXECUTION_COLUMNS)
        if row is None:
            raise StepExecutionNotFound(id=pk)
        return step_execution_from_row(row)

    @operation
    def step_executions(self, job_execution_id: int) -> list[StepExecution]:
        """The job execution's steps in creation order."""
        pk = self._id(JOB_EXECUTION, job_execution_id)
        rows = (
            models.StepExecution.objects.using(self._using)
            .filter(job_execution_id=pk)
            .order_by("id")
            .values(*STEP_EXECUTION_COLUMNS)
        )
        return [step_execution_from_row(row) for row in rows]

    @operation
    def transition_step_execution(
        self, step_execution_id: int, expected_version: int, transition: LifecycleTransition
    ) -> StepExecution:
        """CAS transition of a step; steps follow the full lifecycle table."""
        return self._compare_and_swap(
            models.StepExecution,
            self._id(STEP_EXECUTION, step_execution_id),
            STEP_EXECUTION_COLUMNS,
            step_execution_from_row,
            lambda pk: StepExecutionNotFound(id=pk),
            lambda current, now: compare_and_transition(
                current.metadata, current.version, expected_version, transition.stamped(now)
            ),
        )

    @operation
    def enrich_step_exit_status(
        self, step_execution_id: int, expected_version: int, exit_code: str
    ) -> StepExecution:
        """CAS exit-code enrichment of a step; the status never changes."""
        return self._compare_and_swap(
            models.StepExecution,
            self._id(STEP_EXECUTION, step_execution_id),
            STEP_EXECUTION_COLUMNS,
            step_execution_from_row,
            lambda pk: StepExecutionNotFound(id=pk),
            lambda current, now: compare_and_enrich(
                current.metadata, current.version, expected_version, exit_code
            ),
        )
