"""Operator audit, admin history, holds and retention records in the fake
(the port's ``OperatorAudit``, ``AdminHistory`` and ``Holds``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from oxide_batch.domain.names import (
    IdentifierKind,
    OperatorStringKind,
    validate_identifier,
    validate_operator_string,
)
from oxide_batch.domain.operator import OperatorAction, OperatorRecord, OperatorRecordDraft
from oxide_batch.domain.retention import (
    AuditedActor,
    RetentionAction,
    RetentionHold,
    RetentionRecord,
    RetentionRecordDraft,
)
from tests.fakes.base import UnitOfWorkBase
from tests.fakes.tables import AdminHistoryEntry


class AuditOperations(UnitOfWorkBase):
    """Operator audit, admin history, holds and retention records in the fake
    (the port's ``OperatorAudit``, ``AdminHistory`` and ``Holds``)."""

    # -- OperatorAudit and AdminHistory ---------------------------------------------

    def find_operator_request(
        self, action: OperatorAction, operation_id: str
    ) -> OperatorRecord | None:
        for record in self._open().operator_requests.values():
            if (record.action, record.operation_id) == (action, operation_id):
                return record
        return None

    def append_operator_request(self, draft: OperatorRecordDraft) -> OperatorRecord | None:
        if self.find_operator_request(draft.action, draft.operation_id) is not None:
            return None
        record = OperatorRecord(
            id=self._repository.next_id("operator_requests"),
            requested_at=self.now(),
            **vars(draft),
        )
        self._open().operator_requests[record.id] = record
        return record

    def record_admin_history(
        self, *, actor: str, user_id: int | None, target: str, object_id: int, message: str
    ) -> bool:
        if user_id is None:
            return False
        entry = AdminHistoryEntry(user_id, target, object_id, message)
        self._open().admin_history.append(entry)
        return True

    # -- Holds ----------------------------------------------------------------------

    def job_instance_hold(self, job_instance_id: int) -> RetentionHold | None:
        return self._instance(job_instance_id).hold

    def place_instance_hold(
        self, job_instance_id: int, actor: AuditedActor, reason_code: str
    ) -> RetentionHold:
        pk = validate_identifier(IdentifierKind.JOB_INSTANCE, job_instance_id)
        validate_operator_string(actor.reference, OperatorStringKind.ACTOR)
        validate_operator_string(reason_code, OperatorStringKind.REASON_CODE)
        row = self._instance(pk)
        hold = RetentionHold(pk, actor.reference, reason_code, self.now(), actor.user_id)
        self._open().instances[pk] = dataclasses.replace(row, hold=hold)
        return hold

    def release_instance_hold(self, job_instance_id: int) -> RetentionHold | None:
        row = self._instance(job_instance_id)
        if row.hold is not None:
            self._open().instances[row.instance.id] = dataclasses.replace(row, hold=None)
        return row.hold

    def find_retention_record(
        self, action: RetentionAction, operation_id: str
    ) -> RetentionRecord | None:
        return self.find_retention_records(action, [operation_id]).get(operation_id)

    def find_retention_records(
        self, action: RetentionAction, operation_ids: Sequence[str]
    ) -> dict[str, RetentionRecord]:
        wanted = set(operation_ids)
        return {
            record.operation_id: record
            for record in self._open().retention_records.values()
            if record.action is action and record.operation_id in wanted
        }

    def append_retention_record(self, draft: RetentionRecordDraft) -> RetentionRecord | None:
        if self.find_retention_record(draft.action, draft.operation_id) is not None:
            return None
        record = RetentionRecord(
            **{
                **vars(draft),
                "id": self._repository.next_id("retention_records"),
                "applied_at": self.now(),
            }
        )
        self._open().retention_records[record.id] = record
        return record
