"""The two-phase purge: the survey's input and plan, and the plan handed back to apply."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from oxide_batch.api.errors import flatten_validation
from oxide_batch.api.fields import (
    MAX_BIGINT,
    DigestField,
    EnumField,
    IdField,
    InstantInputField,
    JSONObjectField,
    NameField,
    OperatorStringField,
    StrictCharField,
    StrictIntegerField,
)
from oxide_batch.api.serializers.base import (
    OPERATION_ID,
    REASON_CODE,
    Input,
    Output,
    at,
    name,
    operator_string,
)
from oxide_batch.api.serializers.retention import PurgeCountsOutput
from oxide_batch.domain.names import NameKind
from oxide_batch.domain.retention import (
    DEFAULT_PURGE_REASON,
    DEFAULT_PURGE_STATUSES,
    MAX_BATCH_BOUND,
    BatchBoundOutOfRange,
    MalformedPurgePlan,
    PurgePlan,
    purge_statuses,
)
from oxide_batch.domain.status import BatchStatus


@dataclass(frozen=True)
class SurveyCommand:
    cutoff: datetime
    job_name: str | None
    statuses: frozenset[BatchStatus]
    limit: int


@extend_schema_field(StrictIntegerField(min_value=1, max_value=MAX_BATCH_BOUND))
class BatchBoundField(StrictIntegerField):
    """A purge batch bound: documented with the range the survey accepts, but the
    field itself takes any JSON integer in 0..2^63−1 so that a bound out of range is
    the domain's ``batch_bound_out_of_range`` (on ``limit``), not a field error."""


@extend_schema_field(
    {
        "type": "array",
        "items": {
            "type": "string",
            "enum": [status.value for status in BatchStatus if status.is_finished],
        },
        "minItems": 1,
        "maxItems": 8,
    }
)
class PurgeStatusesField(serializers.ListField):
    """Finished statuses (``purge_statuses`` checks them, so STARTED is
    ``non_terminal_status`` and an empty list ``empty_status_set``)."""


class SurveyInput(Input):
    ended_before = InstantInputField(
        help_text=(
            "The cutoff (RFC 3339 with an offset): at least OXIDE_BATCH_PURGE_MIN_AGE in the past."
        )
    )
    job_name = NameField(NameKind.JOB, required=False, help_text="Only instances of this job.")
    statuses = PurgeStatusesField(
        child=EnumField(BatchStatus),
        required=False,
        max_length=8,
        help_text="Finished statuses; default STOPPED, FAILED, COMPLETED, ABANDONED.",
    )
    limit = BatchBoundField(
        required=False,
        help_text=f"The batch bound, 1–{MAX_BATCH_BOUND} (default {MAX_BATCH_BOUND}).",
    )

    def to_domain(self) -> SurveyCommand:
        data = self.validated_data
        job_name = data.get("job_name")
        if job_name is not None:
            name("job_name", NameKind.JOB, job_name)
        statuses = DEFAULT_PURGE_STATUSES
        if "statuses" in data:
            with at("statuses"):
                statuses = purge_statuses(data["statuses"])
        limit = data.get("limit", MAX_BATCH_BOUND)
        if not 1 <= limit <= MAX_BATCH_BOUND:
            with at("limit"):
                raise BatchBoundOutOfRange(bound=limit)
        return SurveyCommand(data["ended_before"], job_name, statuses, limit)


class ObservedExecutionOutput(Output):
    id = serializers.IntegerField()
    version = serializers.IntegerField()


class PurgeCandidateOutput(Output):
    instance_id = serializers.IntegerField()
    executions = ObservedExecutionOutput(many=True)


# contract §2.5.11.
class PurgePlanOutput(Output):
    """A surveyed batch of whole instances to purge; `purge/apply` takes it
    back whole, unchanged."""

    cutoff = serializers.CharField(help_text="RFC 3339 UTC, milliseconds.")
    job_name = serializers.CharField(allow_null=True)
    statuses = serializers.ListField(child=EnumField(BatchStatus))
    bound = serializers.IntegerField()
    candidates = PurgeCandidateOutput(many=True, help_text="Oldest first.")
    counts = PurgeCountsOutput(help_text="Rows the plan would delete, per kind.")
    held_excluded = serializers.IntegerField(help_text="Eligible instances left out: held.")
    plan_digest = serializers.CharField()


class PlanExecutionInput(Input):
    id = IdField(min_value=1, max_value=MAX_BIGINT)
    version = StrictIntegerField()


class PlanCandidateInput(Input):
    instance_id = IdField(min_value=1, max_value=MAX_BIGINT)
    executions = PlanExecutionInput(many=True)


class PlanCountsInput(Input):
    flow_decisions = StrictIntegerField()
    step_partitions = StrictIntegerField()
    step_executions = StrictIntegerField()
    job_executions = StrictIntegerField()
    job_instances = StrictIntegerField()


class PlanDocumentInput(Input):
    """The JSON shape of a surveyed plan handed back (exact types, 64-bit
    integers, an RFC 3339 cutoff): what the survey answers, and nothing else."""

    cutoff = InstantInputField()
    job_name = StrictCharField(allow_null=True)
    statuses = serializers.ListField(child=EnumField(BatchStatus), max_length=8)
    bound = StrictIntegerField()
    candidates = PlanCandidateInput(many=True)
    counts = PlanCountsInput()
    held_excluded = StrictIntegerField()
    plan_digest = DigestField()


def check_plan_shape(document: Any) -> None:
    """``MalformedPurgePlan`` unless ``document`` has a surveyed plan's exact JSON
    shape: unknown members, types and 64-bit ranges, including the informative
    counts the domain's parser never range-checks, refused as one 400."""
    shape = PlanDocumentInput(data=document)
    if not shape.is_valid():
        where, (first, *_) = next(iter(flatten_validation(shape.errors).items()))
        raise MalformedPurgePlan(reason=f"{where}: {first['message']}")


@extend_schema_field(PurgePlanOutput())
class PlanDocumentField(JSONObjectField):
    """A purge plan as the survey answered it (shape: :func:`check_plan_shape`)."""


class PurgeApplyInput(Input):
    reason_code = OperatorStringField(
        REASON_CODE,
        required=False,
        help_text=f"1–64 bytes of A-Z 0-9 _; default {DEFAULT_PURGE_REASON}.",
    )
    operation_id = OperatorStringField(OPERATION_ID, help_text="1–64 bytes of A-Z a-z 0-9 . _ : -")
    plan = PlanDocumentField(help_text="The survey's answer, taken back whole.")

    def to_domain(self) -> tuple[PurgePlan, str, str]:
        data = self.validated_data
        with at("plan"):
            check_plan_shape(data["plan"])
            plan = PurgePlan.from_json(data["plan"])
        reason_code = data.get("reason_code", DEFAULT_PURGE_REASON)
        return (
            plan,
            operator_string("reason_code", REASON_CODE, reason_code),
            operator_string("operation_id", OPERATION_ID, data["operation_id"]),
        )
