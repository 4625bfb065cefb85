"""The append-only audit lists, newest first."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter
from rest_framework.request import Request
from rest_framework.response import Response

from oxide_batch.api import serializers as s
from oxide_batch.api.fields import ID_SCHEMA, operator_string_schema
from oxide_batch.api.filters import (
    OperatorRequestFilter,
    RecoveryDecisionFilter,
    RetentionRecordFilter,
    apply_filters,
)
from oxide_batch.api.schema import endpoint
from oxide_batch.api.views.base import PAGE_PARAMETERS, READ, BatchView
from oxide_batch.domain.names import OperatorStringKind
from oxide_batch.domain.operator import OperatorAction, RecordOutcome
from oxide_batch.domain.retention import RetentionAction
from oxide_batch.roles import VIEW_BATCH
from oxide_batch.selectors.audit import (
    operator_record_from_row,
    operator_requests,
    recovery_decisions,
    retention_record_from_row,
    retention_records,
)

AUDIT_ID_PARAMETERS = [
    OpenApiParameter("job_execution_id", ID_SCHEMA, description="Only rows of this execution."),
    OpenApiParameter("job_instance_id", ID_SCHEMA, description="Only rows of this instance."),
]
OPERATION_ID_PARAMETER = OpenApiParameter(
    "operation_id", operator_string_schema(OperatorStringKind.OPERATION_ID)
)


class RecoveryDecisionsView(BatchView):
    required_permissions = READ
    job_scoped = False  # the operators' record (contract §4.1 binds instances and executions)

    @endpoint(
        operation_id="list_recovery_decisions",
        summary="Recovery decisions (append-only audit), newest first",
        description="Evidence digests are shown by a 12-character prefix.",
        permission=VIEW_BATCH,
        ok={200: s.AuditRecoveryDecisionPageOutput},
        listing=True,
        parameters=[*AUDIT_ID_PARAMETERS, *PAGE_PARAMETERS],
        tags=["audit"],
    )
    def get(self, request: Request) -> Response:
        queryset = apply_filters(RecoveryDecisionFilter, request, recovery_decisions())
        return self.page(request, queryset, s.AuditRecoveryDecisionOutput)


class OperatorRequestsView(BatchView):
    required_permissions = READ
    job_scoped = False  # the operators' record (contract §4.1 binds instances and executions)

    @endpoint(
        operation_id="list_operator_requests",
        summary="Operator requests (append-only audit: APPLIED and REJECTED), newest first",
        permission=VIEW_BATCH,
        ok={200: s.OperatorRecordPageOutput},
        listing=True,
        parameters=[
            *AUDIT_ID_PARAMETERS,
            OpenApiParameter("action", str, enum=[action.value for action in OperatorAction]),
            OpenApiParameter("outcome", str, enum=[outcome.value for outcome in RecordOutcome]),
            OPERATION_ID_PARAMETER,
            *PAGE_PARAMETERS,
        ],
        tags=["audit"],
    )
    def get(self, request: Request) -> Response:
        queryset = apply_filters(OperatorRequestFilter, request, operator_requests())
        return self.page(request, queryset, s.OperatorRecordOutput, operator_record_from_row)


class RetentionRecordsView(BatchView):
    required_permissions = READ
    job_scoped = False  # the operators' record (contract §4.1 binds instances and executions)

    @endpoint(
        operation_id="list_retention_records",
        summary=(
            "Retention records (append-only audit: holds and purge batches, APPLIED and "
            "REJECTED), newest first"
        ),
        permission=VIEW_BATCH,
        ok={200: s.RetentionRecordPageOutput},
        listing=True,
        parameters=[
            AUDIT_ID_PARAMETERS[1],
            OpenApiParameter("action", str, enum=[action.value for action in RetentionAction]),
            OpenApiParameter("outcome", str, enum=[outcome.value for outcome in RecordOutcome]),
            OPERATION_ID_PARAMETER,
            *PAGE_PARAMETERS,
        ],
        tags=["audit"],
    )
    def get(self, request: Request) -> Response:
        queryset = apply_filters(RetentionRecordFilter, request, retention_records())
        return self.page(request, queryset, s.RetentionRecordOutput, retention_record_from_row)
