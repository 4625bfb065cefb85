"""An operator's resolution of a lost-write marker in the Django adapter
(contract §2.5.14). One locking read and, when there is a marker to resolve, one
write; the execution's status, version, ``updated_at`` and activity stay — a
running runtime's next compare-and-swap is not disturbed."""

from __future__ import annotations

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain import events
from oxide_batch.domain.errors import JobExecutionNotFound
from oxide_batch.domain.evidence import unresolved_lost_write as unresolved
from oxide_batch.domain.lost_write import LostWriteResolution, ResolvedLostWrite
from oxide_batch.domain.names import (
    IdentifierKind,
    OperatorStringKind,
    validate_operator_string,
)
from oxide_batch.domain.retention import format_instant
from oxide_batch.repository.records import CONTROL_COLUMNS, job_execution_from_row
from oxide_batch.repository.unit_of_work import UnitOfWorkBase, operation


class LostWriteOperations(UnitOfWorkBase):
    """The operator's decision on an execution's lost-write marker."""

    @operation
    def resolve_lost_write(
        self, job_execution_id: int, resolution: LostWriteResolution
    ) -> ResolvedLostWrite:
        """Record ``resolution`` on the execution's unresolved lost-write marker,
        whatever the execution's status. Locks the execution row. No marker, or
        one already resolved → ``changed=False``, nothing written. Raises
        ``JobExecutionNotFound``, and the operator-string errors for a bad
        actor, reason code or operation id (before any query)."""
        validate_operator_string(resolution.actor, OperatorStringKind.ACTOR)
        validate_operator_string(resolution.reason_code, OperatorStringKind.REASON_CODE)
        validate_operator_string(resolution.operation_id, OperatorStringKind.OPERATION_ID)
        pk = self._id(IdentifierKind.JOB_EXECUTION, job_execution_id)
        row = self._lock_execution(pk, CONTROL_COLUMNS)
        if row is None:
            raise JobExecutionNotFound(id=pk)
        execution = job_execution_from_row(row)
        who = events.Actor("operator")
        if not unresolved(row["lost_write"], row["lost_write_resolution"]):
            self._record(events.LostWriteResolved(execution=execution, changed=False, actor=who))
            return ResolvedLostWrite(execution, changed=False)
        stored = resolution.stored(format_instant(self.now()))
        self._update(models.JobExecution, pk, {"lost_write_resolution": stored})
        row["lost_write_resolution"] = stored
        self._record(events.LostWriteResolved(execution=execution, changed=True, actor=who))
        return ResolvedLostWrite(execution, changed=True)
