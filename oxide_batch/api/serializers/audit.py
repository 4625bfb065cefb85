"""The append-only audit lists (recovery decisions, operator requests, retention records)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from oxide_batch.api.fields import EnumField, InstantField
from oxide_batch.api.serializers.base import Output, PageOutput
from oxide_batch.api.serializers.operator import OperatorRecordOutput
from oxide_batch.api.serializers.retention import RetentionRecordOutput
from oxide_batch.domain.evidence import Eligibility
from oxide_batch.domain.status import BatchStatus

# Audit lists show evidence digests by this many leading hex characters.
DIGEST_PREFIX = 12


class AuditRecoveryDecisionOutput(Output):
    """A recovery decision in the audit list (the evidence digest as a prefix);
    ``actor`` and ``operation_id`` as on every audit row."""

    id = serializers.IntegerField()
    job_instance_id = serializers.IntegerField()
    job_execution_id = serializers.IntegerField()
    execution_version = serializers.IntegerField()
    prior_status = EnumField(BatchStatus)
    resulting_status = EnumField(BatchStatus)
    reason_code = serializers.CharField()
    actor = serializers.CharField(
        source="operator_reference",
        help_text="The authenticated user's name (or user:<id>), as on the operator request.",
    )
    operation_id = serializers.CharField(
        allow_null=True,
        help_text=(
            "The APPLIED RECOVER operator request of this execution and observed "
            "version; null when there is none (audit-pruned, or recorded without one)."
        ),
    )
    evidence_digest_prefix = serializers.SerializerMethodField(
        help_text=f"The first {DIGEST_PREFIX} hex characters of the evidence digest."
    )
    decided_at = InstantField()
    resolved_step_ids = serializers.ListField(
        child=serializers.IntegerField(),
        help_text="The unfinished steps the decision resolved to FAILED, ascending.",
    )
    eligibility = serializers.CharField(
        allow_null=True,
        help_text=(
            "Why it was allowed: `unknown_status`, `inactive`, `lease_expired` or "
            "`operator_override` (null for decisions an older release recorded)."
        ),
    )
    override = serializers.SerializerMethodField(
        help_text="true when an operator's override allowed it (its note is `override_note`)."
    )
    override_note = serializers.CharField(allow_null=True)

    @extend_schema_field(serializers.BooleanField())
    def get_override(self, row: Mapping[str, Any]) -> bool:
        return bool(row["eligibility"] == Eligibility.OPERATOR_OVERRIDE.value)

    @extend_schema_field(serializers.CharField())
    def get_evidence_digest_prefix(self, row: Mapping[str, Any]) -> str:
        return str(row["evidence_digest"])[:DIGEST_PREFIX]


class AuditRecoveryDecisionPageOutput(PageOutput):
    results = AuditRecoveryDecisionOutput(many=True)


class OperatorRecordPageOutput(PageOutput):
    results = OperatorRecordOutput(many=True)


class RetentionRecordPageOutput(PageOutput):
    results = RetentionRecordOutput(many=True)
