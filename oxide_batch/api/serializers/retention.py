"""Retention holds, the retention audit row and the audited response of a
hold or a purge batch."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from oxide_batch.api.fields import EnumField, InstantField, OperatorStringField
from oxide_batch.api.serializers.base import (
    OPERATION_ID,
    REASON_CODE,
    Input,
    Output,
    ResponseOutcomeField,
    operator_string,
)
from oxide_batch.domain.operator import RecordOutcome
from oxide_batch.domain.retention import PurgeCounts, RetentionAction
from oxide_batch.services.audit import Outcome
from oxide_batch.services.retention import RetentionResult


class HoldInput(Input):
    reason_code = OperatorStringField(
        REASON_CODE, help_text="1–64 bytes of A-Z 0-9 _ (e.g. LEGAL_HOLD)"
    )
    operation_id = OperatorStringField(OPERATION_ID, help_text="1–64 bytes of A-Z a-z 0-9 . _ : -")

    def to_domain(self) -> tuple[str, str]:
        data = self.validated_data
        return (
            operator_string("reason_code", REASON_CODE, data["reason_code"]),
            operator_string("operation_id", OPERATION_ID, data["operation_id"]),
        )


class RetentionHoldOutput(Output):
    job_instance_id = serializers.IntegerField()
    actor = serializers.CharField()
    reason_code = serializers.CharField()
    placed_at = InstantField()


class PurgeCountsOutput(Output):
    flow_decisions = serializers.IntegerField()
    step_partitions = serializers.IntegerField()
    step_executions = serializers.IntegerField()
    job_executions = serializers.IntegerField()
    job_instances = serializers.IntegerField()


class RetentionRecordOutput(Output):
    """One retention audit row: a hold, a release or a purge batch — applied, or
    refused by a rule (REJECTED, with the problem's code)."""

    id = serializers.IntegerField()
    action = EnumField(RetentionAction)
    operation_id = serializers.CharField()
    actor = serializers.CharField()
    reason_code = serializers.CharField()
    request_digest = serializers.CharField()
    job_instance_id = serializers.IntegerField(allow_null=True)
    plan_digest = serializers.CharField(allow_null=True)
    batch_bound = serializers.IntegerField(allow_null=True)
    counts = PurgeCountsOutput()
    changed = serializers.BooleanField()
    outcome = EnumField(RecordOutcome)
    rejection_code = serializers.CharField(
        allow_null=True, help_text="REJECTED: the problem's code."
    )
    rejection_details = serializers.DictField(
        allow_null=True, help_text="REJECTED: the problem's fields."
    )
    applied_at = InstantField(help_text="When it was applied (or refused).")


class HoldResponseOutput(Output):
    """An audited action's answer: `{outcome, replayed, changed, operation_id, hold, record}`."""

    outcome = ResponseOutcomeField()
    replayed = serializers.BooleanField()
    changed = serializers.BooleanField()
    operation_id = serializers.CharField()
    hold = RetentionHoldOutput(allow_null=True, help_text="The hold placed; null once released.")
    record = RetentionRecordOutput()


class PurgeApplyResponseOutput(Output):
    """An audited action's answer: `{outcome, replayed, changed, operation_id, counts, record}`."""

    outcome = ResponseOutcomeField()
    replayed = serializers.BooleanField()
    changed = serializers.BooleanField()
    operation_id = serializers.CharField()
    counts = PurgeCountsOutput(help_text="Rows deleted per kind.")
    record = RetentionRecordOutput()


def retention_data(result: RetentionResult) -> dict[str, Any]:
    """A retention service's result (a hold or a purge batch) as the endpoint answers it."""
    document: dict[str, Any] = {
        "outcome": result.outcome.value,
        "replayed": result.outcome is Outcome.REPLAYED,
        "changed": result.changed,
        "operation_id": result.operation_id,
        "record": result.record,
    }
    if result.record.action is RetentionAction.APPLY_PURGE:
        document["counts"] = result.counts or PurgeCounts()
        data: dict[str, Any] = PurgeApplyResponseOutput(document).data
    else:
        document["hold"] = result.hold
        data = HoldResponseOutput(document).data
    return data
