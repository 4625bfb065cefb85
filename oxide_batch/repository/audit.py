"""Operator audit rows in the Django adapter: append-only, unique per
``(action, operation_id)``."""

from __future__ import annotations

from typing import Any

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain import events
from oxide_batch.domain.operator import (
    OperatorAction,
    OperatorRecord,
    OperatorRecordDraft,
    RecordOutcome,
)
from oxide_batch.domain.status import BatchStatus
from oxide_batch.repository.unit_of_work import UnitOfWorkBase, operation

RECORD_COLUMNS = (
    "id",
    "action",
    "operation_id",
    "actor",
    "actor_user_id",
    "request_digest",
    "outcome",
    "job_instance_id",
    "job_execution_id",
    "reason_code",
    "observed_version",
    "prior_status",
    "result_status",
    "changed",
    "rejection_code",
    "rejection_details",
    "requested_at",
)


def _status(value: str | None) -> BatchStatus | None:
    return None if value is None else BatchStatus(value)


def record_from_row(row: dict[str, Any]) -> OperatorRecord:
    return OperatorRecord(
        id=row["id"],
        action=OperatorAction(row["action"]),
        operation_id=row["operation_id"],
        actor=row["actor"],
        actor_user_id=row["actor_user_id"],
        request_digest=row["request_digest"],
        outcome=RecordOutcome(row["outcome"]),
        job_instance_id=row["job_instance_id"],
        job_execution_id=row["job_execution_id"],
        reason_code=row["reason_code"],
        observed_version=row["observed_version"],
        prior_status=_status(row["prior_status"]),
        result_status=_status(row["result_status"]),
        changed=row["changed"],
        rejection_code=row["rejection_code"],
        rejection_details=row["rejection_details"],
        requested_at=row["requested_at"],
    )


class AuditOperations(UnitOfWorkBase):
    """Reading and appending operator audit rows."""

    @operation
    def find_operator_request(
        self, action: OperatorAction, operation_id: str
    ) -> OperatorRecord | None:
        """The recorded outcome of ``(action, operation_id)``, if any."""
        row = (
            models.OperatorRequest.objects.using(self._using)
            .filter(action=action.value, operation_id=operation_id)
            .values(*RECORD_COLUMNS)
            .first()
        )
        return None if row is None else record_from_row(row)

    @operation
    def append_operator_request(self, draft: OperatorRecordDraft) -> OperatorRecord | None:
        """Append one audit row; ``None`` when ``(action, operation_id)`` is taken
        (a concurrent identical request won: the caller rolls back and replays)."""
        requested_at = self.now()
        values = {
            "action": draft.action.value,
            "operation_id": draft.operation_id,
            "actor": draft.actor,
            "actor_user_id": draft.actor_user_id,
            "request_digest": draft.request_digest,
            "outcome": draft.outcome.value,
            "job_instance_id": draft.job_instance_id,
            "job_execution_id": draft.job_execution_id,
            "reason_code": draft.reason_code,
            "observed_version": draft.observed_version,
            "prior_status": draft.prior_status.value if draft.prior_status else None,
            "result_status": draft.result_status.value if draft.result_status else None,
            "changed": draft.changed,
            "rejection_code": draft.rejection_code,
            "rejection_details": draft.rejection_details,
            "requested_at": requested_at,
        }
        new_id = self._insert_unless_conflict(
            models.OperatorRequest, values, ("action", "operation_id")
        )
        if new_id is None:
            return None
        record = record_from_row({"id": new_id, **values})
        self._record(
            events.OperatorRequestRecorded(
                record=record, actor=events.Actor("operator", draft.actor_user_id)
            )
        )
        return record

    @operation
    def record_admin_history(
        self, *, actor: str, user_id: int | None, target: str, object_id: int, message: str
    ) -> bool:
        """Add the operator's action to the admin's own history (Django's
        ``LogEntry``, "Recent actions" and an object's HISTORY), in this unit of
        work: it commits with the action. ``target`` is ``"jobexecution"`` or
        ``"jobinstance"``. A ``LogEntry`` names the user who acted (``user_id``: the
        console's or the API's authenticated user, or the account of a command's
        login — never one found by the actor's free-text name, which anyone running
        a command may write); without one (the watchdog, a login with no account)
        it leaves none — the audit rows and the timeline say who. ``True`` when
        recorded."""
        from django.contrib.admin.models import CHANGE, LogEntry
        from django.contrib.contenttypes.models import ContentType

        del actor  # the audit row keeps it; the history names an account only
        if user_id is None:
            return False
        model = {"jobexecution": models.JobExecution, "jobinstance": models.JobInstance}[target]
        LogEntry.objects.using(self._using).create(
            user_id=user_id,
            content_type=ContentType.objects.db_manager(self._using).get_for_model(model),
            object_id=str(object_id),
            object_repr=f"{model._meta.verbose_name} #{object_id}"[:200],
            action_flag=CHANGE,
            change_message=message,
        )
        self._record(
            events.AdminHistoryRecorded(
                target=target, object_id=object_id, actor=events.Actor("operator", user_id)
            )
        )
        return True
