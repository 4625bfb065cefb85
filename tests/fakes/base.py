"""The fake's transaction and the row helpers its operations share."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping
from datetime import datetime
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeVar

from oxide_batch.domain.errors import (
    ConcurrentModification,
    ExecutionOwned,
    JobExecutionNotFound,
    JobInstanceNotFound,
    NotFound,
    StepExecutionNotFound,
    VersionAhead,
)
from oxide_batch.domain.evidence import claimed_by_another
from oxide_batch.domain.execution import StepExecution
from oxide_batch.domain.fused import WriteControl
from oxide_batch.domain.lifecycle import LifecycleTransition
from oxide_batch.domain.names import IdentifierKind, validate_identifier
from oxide_batch.repository.failure_details import detail_to_keep, scrubbed_detail
from oxide_batch.repository.records import parameters_to_json
from oxide_batch.repository.steps import StepState
from tests.fakes.tables import DetailRow, ExecutionRow, InstanceRow, Tables, by_id

if TYPE_CHECKING:
    from tests.fakes import FakeJobRepository

R = TypeVar("R")
JOB_INSTANCE = IdentifierKind.JOB_INSTANCE
JOB_EXECUTION = IdentifierKind.JOB_EXECUTION
STEP_EXECUTION = IdentifierKind.STEP_EXECUTION
_NOT_FOUND: dict[IdentifierKind, Callable[[int], NotFound]] = {
    JOB_INSTANCE: lambda pk: JobInstanceNotFound(id=pk),
    JOB_EXECUTION: lambda pk: JobExecutionNotFound(id=pk),
    STEP_EXECUTION: lambda pk: StepExecutionNotFound(id=pk),
}


class UnitOfWorkBase:
    """One transaction over a copy of the tables (``tests.fakes``), and the row
    helpers every operation shares."""

    def __init__(
        self,
        repository: FakeJobRepository,
        *,
        runtime_user_id: int | None = None,
        owner_token: bytes | None = None,
    ) -> None:
        self._repository = repository
        self._runtime_user_id = runtime_user_id
        self._owner_token = owner_token
        self._tables: Tables | None = None
        self._began_after = 0
        self._finished = False
        self._in_hand: int | None = None
        self._control: dict[int, WriteControl] = {}
        self._created_steps: dict[int, StepState] = {}
        # Parents whose partition plan this unit of work created: assignment waits
        # for the commit (``PartitionPlanNotCommitted``).
        self._plans_created: set[int] = set()

    # -- Transaction ----------------------------------------------------------------

    def __enter__(self) -> Self:
        if self._tables is not None or self._finished:
            raise RuntimeError("a unit of work is entered once")
        self._tables = self._repository.tables.copy()
        self._began_after = self._repository.commits
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._finished:
            return
        self._finished = True
        if isinstance(exc, VersionAhead):
            if exc.job_execution_id is None:
                exc.job_execution_id = self._in_hand
            if exc.job_execution_id is not None:
                self._repository.mark_lost_write(exc.job_execution_id)

    def commit(self) -> None:
        tables = self._open()
        self._finished = True
        if self._repository.commits != self._began_after:
            raise ConcurrentModification()
        self._repository.tables = tables
        self._repository.commits += 1

    def rollback(self) -> None:
        self._open()
        self._finished = True

    def now(self) -> datetime:
        return self._repository.clock.now()

    def _open(self) -> Tables:
        if self._tables is None or self._finished:
            raise RuntimeError("the unit of work is not open")
        return self._tables

    # -- rows -----------------------------------------------------------------------

    def _found(self, rows: Mapping[int, R], kind: IdentifierKind, value: int) -> R:
        """The row ``value`` names (validated as ``kind``), or ``kind``'s not-found
        refusal: the adapter's ``_id`` and its read of one row."""
        pk = validate_identifier(kind, value)
        row = rows.get(pk)
        if row is None:
            raise _NOT_FOUND[kind](pk)
        return row

    def _instance(self, job_instance_id: int) -> InstanceRow:
        return self._found(self._open().instances, JOB_INSTANCE, job_instance_id)

    def _execution(self, job_execution_id: int) -> ExecutionRow:
        """The execution's row, as the one a write works on: in hand (the lost-write
        marker's target) and its control remembered (``write_control``)."""
        row = self._found(self._open().executions, JOB_EXECUTION, job_execution_id)
        self._in_hand = row.execution.id
        self._remember(row)
        return row

    def _step(self, step_execution_id: int) -> StepExecution:
        step = self._found(self._open().steps, STEP_EXECUTION, step_execution_id)
        self._execution(step.job_execution_id)  # in hand, its control remembered
        return step

    def _put(self, row: ExecutionRow) -> None:
        self._open().executions[row.execution.id] = row
        self._remember(row)

    def _remember(self, row: ExecutionRow) -> None:
        self._control[row.execution.id] = WriteControl.of(
            recorded_token=row.owner_token,
            carried_token=self._owner_token,
            stop_requested_at=row.stop_requested_at,
            recovery_decision_id=row.execution.recovery_decision_id,
        )

    def _check_claimant(self, row: ExecutionRow, *, token: bool = True) -> None:
        """The adapter's ``_check_claimant``: another runtime user's claim, or
        (``token``) another recorded owner token, is ``ExecutionOwned``."""
        pk = row.execution.id
        if claimed_by_another(row.owner_user_id, self._runtime_user_id):
            raise ExecutionOwned(id=pk, other_user=True)
        carried, recorded = self._owner_token, row.owner_token
        if (
            token
            and carried is not None
            and recorded is not None
            and not hmac.compare_digest(recorded, carried)
        ):
            raise ExecutionOwned(id=pk, other_user=False)

    def _steps_of(self, job_execution_id: int) -> list[StepExecution]:
        steps = self._open().steps.values()
        return sorted((s for s in steps if s.job_execution_id == job_execution_id), key=by_id)

    def _executions_of(self, job_instance_id: int) -> list[ExecutionRow]:
        rows = self._open().executions.values()
        found = [row for row in rows if row.execution.job_instance_id == job_instance_id]
        return sorted(found, key=lambda row: row.execution.attempt)

    def _keep_failure_detail(
        self,
        job_instance_id: int,
        job_execution_id: int,
        step_execution_id: int | None,
        transition: LifecycleTransition,
        now: datetime,
    ) -> None:
        """What the adapter's failing transition keeps of its failure's detail,
        scrubbed of the instance's hidden parameter values (the same rule)."""
        failure = detail_to_keep(transition.failure)
        if failure is None:
            return
        key = self._instance(job_instance_id).instance.key
        detail = scrubbed_detail(failure, parameters_to_json(key))
        if detail is None:
            return
        details = self._open().failure_details
        pk = self._repository.next_id("failure_details")
        details[pk] = DetailRow(
            pk,
            job_instance_id,
            job_execution_id,
            step_execution_id,
            failure.failure_id,
            detail,
            now,
        )
