"""The audit records (append-only; newest first by id through the API's
keyset pagination)."""

from __future__ import annotations

from typing import Any

from django.db.models import OuterRef, QuerySet, Subquery

from oxide_batch import models  # noqa: TID251 (the model layer)
from oxide_batch.domain.operator import OperatorRecord
from oxide_batch.repository.audit import RECORD_COLUMNS, record_from_row
from oxide_batch.repository.records import DECISION_COLUMNS, Row
from oxide_batch.repository.retention import RECORD_COLUMNS as RETENTION_RECORD_COLUMNS
from oxide_batch.repository.retention import retention_record_from_row as retention_record_from_row

# The repository's decision columns as the audit list shows them: with the
# instance, without the (large) evidence.
RECOVERY_DECISION_COLUMNS = (
    "id",
    "job_instance_id",
    *(column for column in DECISION_COLUMNS[1:] if column != "evidence"),
)


def recovery_decisions() -> QuerySet[Any, dict[str, Any]]:
    """Decisions with ``operation_id``: the one APPLIED RECOVER request of the same
    execution at the observed version (a recovery applies once per execution and
    version), by a subquery on ``ob_operator_execution``; null without one."""
    request = models.OperatorRequest.objects.filter(
        job_execution_id=OuterRef("job_execution_id"),
        action="RECOVER",
        outcome="APPLIED",
        observed_version=OuterRef("execution_version"),
    ).order_by("id")
    rows: QuerySet[Any, dict[str, Any]] = models.RecoveryDecision.objects.annotate(
        operation_id=Subquery(request.values("operation_id")[:1])
    ).values(*RECOVERY_DECISION_COLUMNS, "operation_id")
    return rows


def operator_requests() -> QuerySet[Any, dict[str, Any]]:
    rows: QuerySet[Any, dict[str, Any]] = models.OperatorRequest.objects.values(*RECORD_COLUMNS)
    return rows


def operator_record_from_row(row: Row) -> OperatorRecord:
    return record_from_row(dict(row))


def retention_records() -> QuerySet[Any, dict[str, Any]]:
    rows: QuerySet[Any, dict[str, Any]] = models.RetentionRecord.objects.values(
        *RETENTION_RECORD_COLUMNS
    )
    return rows
