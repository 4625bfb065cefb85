"""Input and output serializers of the API.

Inputs check the JSON shape (types, required and unknown members, enum codes,
integer ranges); :meth:`Input.to_domain` then builds the domain values, each
under :func:`~oxide_batch.api.errors.at` so a domain error names its field.
No rule lives here: names, identifiers, envelopes, parameters and plans are
validated by the domain. Outputs render the domain values (and the selectors'
records) with statuses and categories as durable codes, instants as RFC 3339
UTC with milliseconds and digests as lowercase hex.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.conf import settings
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ErrorDetail

from oxide_batch.api.errors import at, flatten_validation
from oxide_batch.api.fields import (
    MAX_BIGINT,
    DigestField,
    EnumField,
    IdField,
    InstantField,
    InstantInputField,
    JSONObjectField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
)
from oxide_batch.api.selectors import ExecutionRecord, InstanceRecord
from oxide_batch.domain.definitions import Manifest, UpgradeEdge
from oxide_batch.domain.errors import InvalidParameterValue, PartitionPlanTooLarge
from oxide_batch.domain.evidence import RecoveryProposal, default_failure_category
from oxide_batch.domain.execution import COUNT_FIELDS, ExecutionCounts, FailureSummary
from oxide_batch.domain.flow import (
    MAX_START_LIMIT,
    FlowDecisionRequest,
    FlowTarget,
    FlowTransitionKind,
    TerminalKind,
)
from oxide_batch.domain.identifiers import IdentifierKind, validate_identifier
from oxide_batch.domain.lifecycle import LifecycleTransition
from oxide_batch.domain.names import (
    NameKind,
    OperatorStringKind,
    parse_owner_token,
    validate_name,
    validate_operator_string,
)
from oxide_batch.domain.operator import OperatorAction, RecordOutcome
from oxide_batch.domain.parameters import JobInstanceKey, JobParameter, ParameterType
from oxide_batch.domain.partitions import MAX_PARTITIONS, PartitionPlanEntry
from oxide_batch.domain.recovery import RecoveryDecision, RecoveryDisposition
from oxide_batch.domain.retention import (
    DEFAULT_PURGE_REASON,
    DEFAULT_PURGE_STATUSES,
    MAX_BATCH_BOUND,
    BatchBoundOutOfRange,
    MalformedPurgePlan,
    PurgeCounts,
    PurgePlan,
    RetentionAction,
    purge_statuses,
)
from oxide_batch.domain.state import (
    PARTITION_CONTEXT_LIMITS,
    EnvelopeKind,
    StateEnvelope,
    StateLimits,
)
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.services.audit import Outcome
from oxide_batch.services.operator import OperatorResult
from oxide_batch.services.retention import RetentionResult

if TYPE_CHECKING:
    _Serializer = serializers.Serializer[Any]
else:
    _Serializer = serializers.Serializer

K = IdentifierKind
REASON_CODE = OperatorStringKind.REASON_CODE
OPERATION_ID = OperatorStringKind.OPERATION_ID
# Audit lists show evidence digests by this many leading hex characters.
DIGEST_PREFIX = 12


def state_limits() -> StateLimits:
    return StateLimits(settings.OXIDE_BATCH_STATE_MAX_BYTES, settings.OXIDE_BATCH_STATE_MAX_DEPTH)


def identifier(path: str, kind: IdentifierKind, value: int) -> int:
    with at(path):
        return validate_identifier(kind, value)


def name(path: str, kind: NameKind, value: str) -> str:
    with at(path):
        return validate_name(value, kind)


def envelope(path: str, raw: Any, kind: EnvelopeKind, limits: StateLimits) -> StateEnvelope | None:
    if raw is None:
        return None
    with at(path):
        return StateEnvelope.from_json(raw, kind=kind, limits=limits)


# ============================================================================ inputs


class Input(_Serializer):
    """Refuses members it does not declare (a typo must not be ignored)."""

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            unknown = [key for key in data if key not in self.fields]
            if unknown:
                raise serializers.ValidationError(
                    {
                        str(key)[:128]: [ErrorDetail("unknown member", code="unknown_member")]
                        for key in unknown
                    }
                )
        return super().to_internal_value(data)

    def to_domain(self) -> Any:
        return self.validated_data

    # Inputs are never saved through the serializer.
    def create(self, validated_data: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def update(self, instance: Any, validated_data: Any) -> Any:  # pragma: no cover
        raise NotImplementedError


class DefinitionInput(Input):
    job_name = StrictCharField()
    revision = StrictCharField()
    manifest = serializers.JSONField(
        help_text="A JSON object; the server canonicalises it (format 1–3, no floats, ≤ 64 KiB)."
    )

    def to_domain(self) -> tuple[str, str, Any]:
        data = self.validated_data
        job_name = name("job_name", NameKind.JOB, data["job_name"])
        revision = name("revision", NameKind.REVISION, data["revision"])
        with at("manifest"):
            Manifest.canonicalise(data["manifest"], job_name=job_name)
        return job_name, revision, data["manifest"]


class UpgradeInput(Input):
    job_name = StrictCharField()
    key = StrictCharField()
    from_digest = DigestField()
    to_digest = DigestField()
    step_mapping = serializers.DictField(
        child=StrictCharField(), help_text="Source step name → target step name."
    )

    def to_domain(self) -> UpgradeEdge:
        data = self.validated_data
        name("job_name", NameKind.JOB, data["job_name"])
        name("key", NameKind.UPGRADE_KEY, data["key"])
        with at("step_mapping"):
            return UpgradeEdge.of(
                job_name=data["job_name"],
                key=data["key"],
                from_digest=data["from_digest"],
                to_digest=data["to_digest"],
                step_mapping=data["step_mapping"],
            )


def parameters(path: str, raw: Mapping[str, Any], *, identifying: bool) -> list[JobParameter]:
    found = []
    with at(path):
        for parameter_name, value in raw.items():
            parameter = JobParameter.from_json(parameter_name, value, identifying=identifying)
            if parameter.type is ParameterType.STRING and "\x00" in str(parameter.value):
                # PostgreSQL cannot store NUL in text or jsonb.
                raise InvalidParameterValue(reason="a string value must not contain NUL")
            found.append(parameter)
    return found


class InstanceInput(Input):
    job_name = StrictCharField()
    identifying_parameters = JSONObjectField(
        required=False,
        help_text=(
            "name → value: a string, boolean or integer (I64, or U64 above 2^63−1), or "
            '{"type": "string"|"i64"|"u64"|"bool", "value": …}.'
        ),
    )
    non_identifying_parameters = JSONObjectField(
        required=False, help_text="Accepted and validated, never stored (no effect on identity)."
    )

    def to_domain(self) -> JobInstanceKey:
        data = self.validated_data
        job_name = name("job_name", NameKind.JOB, data["job_name"])
        found = parameters(
            "identifying_parameters", data.get("identifying_parameters", {}), identifying=True
        )
        found += parameters(
            "non_identifying_parameters",
            data.get("non_identifying_parameters", {}),
            identifying=False,
        )
        with at("identifying_parameters"):
            return JobInstanceKey.of(job_name, found)


class LaunchInput(Input):
    definition_digest = DigestField(
        required=False,
        help_text="Bind the attempt to this definition; default: the latest attempt's.",
    )

    def to_domain(self) -> str | None:
        digest: str | None = self.validated_data.get("definition_digest")
        return digest


class FailureInput(Input):
    category = EnumField(FailureCategory)
    failure_id = IdField()


class TransitionInput(Input):
    expected_version = StrictIntegerField()
    status = EnumField(BatchStatus)
    failure = FailureInput(required=False, allow_null=True)
    terminal_rollback = StrictBooleanField(required=False, default=False)

    def to_domain(self) -> tuple[int, LifecycleTransition]:
        data = self.validated_data
        failure = None
        if data.get("failure") is not None:
            raw = data["failure"]
            identifier("failure.failure_id", K.FAILURE, raw["failure_id"])
            failure = FailureSummary(raw["category"], raw["failure_id"])
        transition = LifecycleTransition(
            data["status"], failure=failure, terminal_rollback=data["terminal_rollback"]
        )
        return data["expected_version"], transition


class ExitStatusInput(Input):
    expected_version = StrictIntegerField()
    exit_code = StrictCharField()

    def to_domain(self) -> tuple[int, str]:
        data = self.validated_data
        return data["expected_version"], name("exit_code", NameKind.EXIT_CODE, data["exit_code"])


class ClaimInput(Input):
    expected_version = StrictIntegerField()
    owner_token = StrictCharField(help_text="16 bytes as 32 lowercase hex characters.")

    def to_domain(self) -> tuple[int, bytes]:
        data = self.validated_data
        with at("owner_token"):
            return data["expected_version"], parse_owner_token(data["owner_token"])


class ControlInput(Input):
    owner_token = StrictCharField(help_text="16 bytes as 32 lowercase hex characters.")

    def to_domain(self) -> bytes:
        with at("owner_token"):
            return parse_owner_token(self.validated_data["owner_token"])


class StepInput(Input):
    step_name = StrictCharField()
    node_id = StrictCharField(required=False, help_text="Flow node; default: the step name.")
    start_limit = StrictIntegerField(required=False, min_value=1, max_value=MAX_START_LIMIT)

    def to_domain(self) -> tuple[str, str | None, int | None]:
        data = self.validated_data
        step_name = name("step_name", NameKind.STEP, data["step_name"])
        node_id = data.get("node_id")
        if node_id is not None:
            name("node_id", NameKind.NODE, node_id)
        return step_name, node_id, data.get("start_limit")


class CountsInput(Input):
    read = StrictIntegerField(required=False, default=0)
    processed = StrictIntegerField(required=False, default=0)
    written = StrictIntegerField(required=False, default=0)
    filtered = StrictIntegerField(required=False, default=0)
    committed = StrictIntegerField(required=False, default=0)
    rolled_back = StrictIntegerField(required=False, default=0)


class ChunkInput(Input):
    expected_version = StrictIntegerField()
    counts = CountsInput(required=False, help_text="This chunk's deltas (each default 0).")
    checkpoint = serializers.JSONField(
        required=False, allow_null=True, help_text="{schema, schema_version, payload}"
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # Declared here: a class attribute named ``context`` would shadow Serializer.context.
        fields["context"] = serializers.JSONField(
            required=False, allow_null=True, help_text="{schema, schema_version, payload}"
        )
        return fields

    def to_domain(
        self,
    ) -> tuple[int, ExecutionCounts, StateEnvelope | None, StateEnvelope | None]:
        data = self.validated_data
        raw_counts = data.get("counts") or {}
        counts = ExecutionCounts(**{field: raw_counts.get(field, 0) for field in COUNT_FIELDS})
        limits = state_limits()
        checkpoint = envelope("checkpoint", data.get("checkpoint"), EnvelopeKind.CHECKPOINT, limits)
        context = envelope("context", data.get("context"), EnvelopeKind.CONTEXT, limits)
        return data["expected_version"], counts, checkpoint, context


class PartitionEntryInput(Input):
    key = StrictCharField(help_text="1–128 UTF-8 bytes, compared byte for byte.")

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["context"] = serializers.JSONField(
            required=False, allow_null=True, help_text="{schema, schema_version, payload}, ≤ 4 KiB"
        )
        return fields


class PartitionPlanInput(Input):
    entries = PartitionEntryInput(many=True, help_text=f"1–{MAX_PARTITIONS} entries, unique keys.")

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            entries = data.get("entries")
            if isinstance(entries, list) and len(entries) > MAX_PARTITIONS:
                raise PartitionPlanTooLarge(max=MAX_PARTITIONS)
        return super().to_internal_value(data)

    def to_domain(self) -> list[PartitionPlanEntry]:
        found = []
        for index, entry in enumerate(self.validated_data["entries"]):
            context = envelope(
                f"entries.{index}.context",
                entry.get("context"),
                EnvelopeKind.PARTITION_CONTEXT,
                PARTITION_CONTEXT_LIMITS,
            )
            with at(f"entries.{index}.key"):
                found.append(PartitionPlanEntry(entry["key"], context))
        return found


class PlanRestartInput(Input):
    source_step_execution_id = IdField()

    def to_domain(self) -> int:
        return identifier(
            "source_step_execution_id",
            K.STEP_EXECUTION,
            self.validated_data["source_step_execution_id"],
        )


class PartitionCasInput(Input):
    expected_version = StrictIntegerField()
    worker_step_execution_id = IdField()

    def to_domain(self) -> tuple[int, int]:
        data = self.validated_data
        worker = identifier(
            "worker_step_execution_id", K.STEP_EXECUTION, data["worker_step_execution_id"]
        )
        return data["expected_version"], worker


class AggregateInput(Input):
    expected_version = StrictIntegerField()

    def to_domain(self) -> int:
        version: int = self.validated_data["expected_version"]
        return version


class FlowDecisionInput(Input):
    source_node_id = StrictCharField()
    source_step_execution_id = IdField(required=False, allow_null=True)
    kind = EnumField(FlowTransitionKind)
    observed_outcome = StrictCharField(help_text="The exit code the decision observed.")
    target = JSONObjectField(help_text='{"node": "<id>"} or {"terminal": "COMPLETE"|"FAIL"|"STOP"}')
    plan_fingerprint = DigestField(help_text="The definition's manifest digest.")
    input_digest = DigestField()
    reused_decision_id = IdField(required=False, allow_null=True)

    def request_for(self, job_execution_id: int) -> FlowDecisionRequest:
        data = self.validated_data
        name("source_node_id", NameKind.NODE, data["source_node_id"])
        name("observed_outcome", NameKind.EXIT_CODE, data["observed_outcome"])
        for field, kind in (
            ("source_step_execution_id", K.STEP_EXECUTION),
            ("reused_decision_id", K.FLOW_DECISION),
        ):
            if data.get(field) is not None:
                identifier(field, kind, data[field])
        with at("target"):
            target = FlowTarget.from_json(data["target"])
        return FlowDecisionRequest(
            job_execution_id=job_execution_id,
            source_node_id=data["source_node_id"],
            kind=data["kind"],
            observed_outcome=data["observed_outcome"],
            target=target,
            plan_fingerprint=data["plan_fingerprint"],
            input_digest=data["input_digest"],
            source_step_execution_id=data.get("source_step_execution_id"),
            reused_decision_id=data.get("reused_decision_id"),
        )


class ReusableQuery(Input):
    node_id = StrictCharField()
    plan_fingerprint = DigestField()
    input_digest = DigestField()
    kind = EnumField(FlowTransitionKind)

    def to_domain(self) -> tuple[str, str, str, FlowTransitionKind]:
        data = self.validated_data
        node = name("node_id", NameKind.NODE, data["node_id"])
        return node, data["plan_fingerprint"], data["input_digest"], data["kind"]


# =========================================================================== outputs


class Output(_Serializer):
    """Read-only rendering; never validates or saves."""

    def create(self, validated_data: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def update(self, instance: Any, validated_data: Any) -> Any:  # pragma: no cover
        raise NotImplementedError


class CountsOutput(Output):
    read = serializers.IntegerField()
    processed = serializers.IntegerField()
    written = serializers.IntegerField()
    filtered = serializers.IntegerField()
    committed = serializers.IntegerField()
    rolled_back = serializers.IntegerField()


class FailureOutput(Output):
    category = EnumField(FailureCategory)
    failure_id = serializers.IntegerField()


class DefinitionRefOutput(Output):
    revision = serializers.CharField()
    format = serializers.IntegerField()
    digest = serializers.CharField()


class ExecutionOutput(Output):
    id = serializers.IntegerField(source="execution.id")
    job_instance_id = serializers.IntegerField(source="execution.job_instance_id")
    job_name = serializers.CharField(source="execution.job_name")
    attempt = serializers.IntegerField(source="execution.attempt")
    status = EnumField(BatchStatus, source="execution.status")
    exit_code = serializers.CharField(source="execution.exit_code")
    created_at = InstantField(source="execution.created_at")
    started_at = InstantField(source="execution.started_at", allow_null=True)
    ended_at = InstantField(source="execution.ended_at", allow_null=True)
    updated_at = InstantField(source="execution.updated_at")
    counts = CountsOutput(source="execution.counts")
    failure = FailureOutput(source="execution.failure", allow_null=True)
    version = serializers.IntegerField(source="execution.version")
    stop_requested = serializers.BooleanField(source="extras.stop_requested")
    stop_requested_at = InstantField(source="extras.stop_requested_at", allow_null=True)
    owner_recorded = serializers.BooleanField(source="extras.owner_recorded")
    last_observed_at = InstantField(source="extras.last_observed_at", allow_null=True)
    definition = DefinitionRefOutput(
        source="extras.definition",
        allow_null=True,
        help_text="null for an attempt bound to the built-in legacy definition",
    )


class StepOutput(Output):
    id = serializers.IntegerField()
    job_instance_id = serializers.IntegerField()
    job_execution_id = serializers.IntegerField()
    step_name = serializers.CharField()
    node_id = serializers.CharField()
    status = EnumField(BatchStatus)
    exit_code = serializers.CharField()
    created_at = InstantField()
    started_at = InstantField(allow_null=True)
    ended_at = InstantField(allow_null=True)
    updated_at = InstantField()
    counts = CountsOutput()
    failure = FailureOutput(allow_null=True)
    version = serializers.IntegerField()


class ParameterOutput(Output):
    name = serializers.CharField()
    type = EnumField(ParameterType)
    value = serializers.JSONField(
        required=False,
        help_text="Only for names listed in OXIDE_BATCH_VISIBLE_PARAMETERS.",
    )


class HoldOutput(Output):
    actor = serializers.CharField()
    reason_code = serializers.CharField()
    placed_at = InstantField()


class InstanceOutput(Output):
    id = serializers.IntegerField(source="instance.id")
    job_name = serializers.CharField(source="instance.job_name")
    key_digest = serializers.CharField(source="instance.key.digest")
    parameters = serializers.SerializerMethodField(
        help_text="Identifying parameters in name byte order; values only where allowed."
    )
    created_at = InstantField(source="instance.created_at")
    hold = HoldOutput(allow_null=True)

    @extend_schema_field(ParameterOutput(many=True))
    def get_parameters(self, record: InstanceRecord) -> list[dict[str, Any]]:
        visible = settings.OXIDE_BATCH_VISIBLE_PARAMETERS
        shown = []
        for parameter in record.instance.key.parameters:
            item: dict[str, Any] = {"name": parameter.name, "type": parameter.type.value}
            if parameter.name in visible:
                item["value"] = parameter.value
            shown.append(item)
        return shown


class EnvelopeOutput(Output):
    schema = serializers.CharField()
    schema_version = serializers.IntegerField()
    payload = serializers.DictField()


class PartitionOutput(Output):
    id = serializers.IntegerField()
    step_execution_id = serializers.IntegerField()
    key = serializers.CharField()
    ordinal = serializers.IntegerField()
    status = EnumField(BatchStatus)
    exit_code = serializers.CharField()
    counts = CountsOutput()
    version = serializers.IntegerField()
    worker_step_execution_id = serializers.IntegerField(allow_null=True)

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["context"] = EnvelopeOutput(
            required=False,
            allow_null=True,
            help_text="The partition context: only for users who may read payloads.",
        )
        return fields

    def to_representation(self, instance: Any) -> dict[str, Any]:
        document: dict[str, Any] = super().to_representation(instance)
        if not self.context.get("payloads", False) or not hasattr(instance, "context"):
            document.pop("context", None)
        return document


class PlanOutput(Output):
    step_execution_id = serializers.IntegerField()
    partitions = PartitionOutput(many=True, help_text="In partition key byte order.")


class CheckpointOutput(Output):
    step = StepOutput()
    checkpoint = EnvelopeOutput(allow_null=True)

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["context"] = EnvelopeOutput(allow_null=True)
        return fields


class ControlOutput(Output):
    execution = ExecutionOutput()
    owner_matches = serializers.BooleanField()
    stop_requested = serializers.BooleanField()


class FlowTargetOutput(Output):
    node = serializers.CharField(required=False)
    terminal = EnumField(TerminalKind, required=False)

    def to_representation(self, instance: FlowTarget) -> dict[str, Any]:
        return instance.as_json()


class FlowDecisionOutput(Output):
    id = serializers.IntegerField()
    job_execution_id = serializers.IntegerField()
    sequence = serializers.IntegerField()
    source_node_id = serializers.CharField()
    source_step_execution_id = serializers.IntegerField(allow_null=True)
    kind = EnumField(FlowTransitionKind)
    observed_outcome = serializers.CharField()
    target = FlowTargetOutput()
    plan_fingerprint = serializers.CharField()
    input_digest = serializers.CharField()
    reused_decision_id = serializers.IntegerField(allow_null=True)
    decided_at = InstantField()


class FlowDecisionListOutput(Output):
    results = FlowDecisionOutput(many=True, help_text="In sequence order.")


class ReusableOutput(Output):
    decision = FlowDecisionOutput(allow_null=True)


class DescriptorOutput(Output):
    descriptor_version = serializers.IntegerField()
    schema_version = serializers.IntegerField()
    capabilities = serializers.ListField(child=serializers.CharField())


class DefinitionOutput(Output):
    job_name = serializers.CharField()
    revision = serializers.CharField()
    format = serializers.IntegerField()
    digest = serializers.CharField()
    registered_at = InstantField()


class UpgradeOutput(Output):
    job_name = serializers.CharField()
    key = serializers.CharField()
    from_digest = serializers.CharField()
    to_digest = serializers.CharField()
    step_mapping = serializers.DictField(child=serializers.CharField())


class ProblemErrorOutput(Output):
    code = serializers.CharField()
    message = serializers.CharField()


class ProblemOutput(Output):
    """``application/problem+json`` (RFC 9457) plus the error's own fields."""

    type = serializers.CharField()
    title = serializers.CharField()
    status = serializers.IntegerField()
    code = serializers.CharField(help_text="The durable error code, or invalid_request.")
    detail = serializers.CharField()

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # ``errors`` would shadow Serializer.errors as a class attribute.
        fields["errors"] = serializers.DictField(
            child=ProblemErrorOutput(many=True),
            required=False,
            help_text="invalid_request only: field path → errors.",
        )
        fields["replayed"] = serializers.BooleanField(
            required=False,
            help_text="Operator endpoints: true when a recorded refusal is answered again.",
        )
        return fields


def execution_data(record: ExecutionRecord) -> dict[str, Any]:
    data: dict[str, Any] = ExecutionOutput(record).data
    return data


class PageOutput(Output):
    next = serializers.URLField(allow_null=True, help_text="The next page, or null at the end.")
    previous = serializers.URLField(allow_null=True, help_text="The previous page, or null.")


class InstancePageOutput(PageOutput):
    results = InstanceOutput(many=True)


class ExecutionPageOutput(PageOutput):
    results = ExecutionOutput(many=True)


class StepPageOutput(PageOutput):
    results = StepOutput(many=True)


# ====================================================================== operator


def operator_string(path: str, kind: OperatorStringKind, value: str) -> str:
    with at(path):
        return validate_operator_string(value, kind)


class StopInput(Input):
    expected_version = StrictIntegerField(
        help_text="Checked on STARTING/STARTED; a no-op stop (STOPPING or finished) skips it."
    )
    operation_id = StrictCharField(help_text="1–64 bytes of A-Z a-z 0-9 . _ : -")

    def to_domain(self) -> tuple[int, str]:
        data = self.validated_data
        operation_id = operator_string("operation_id", OPERATION_ID, data["operation_id"])
        return data["expected_version"], operation_id


class AbandonInput(Input):
    expected_version = StrictIntegerField(
        help_text="Checked on STOPPED/FAILED; abandoning an ABANDONED attempt skips it."
    )
    reason_code = StrictCharField(help_text="1–64 bytes of A-Z 0-9 _")
    operation_id = StrictCharField(help_text="1–64 bytes of A-Z a-z 0-9 . _ : -")

    def to_domain(self) -> tuple[int, str, str]:
        data = self.validated_data
        reason_code = operator_string("reason_code", REASON_CODE, data["reason_code"])
        operation_id = operator_string("operation_id", OPERATION_ID, data["operation_id"])
        return data["expected_version"], reason_code, operation_id


@dataclass(frozen=True)
class RecoverCommand:
    expected_version: int
    disposition: RecoveryDisposition
    reason_code: str
    evidence_digest: str
    operation_id: str
    failure_category: FailureCategory | None
    failure_id: int | None


class RecoverInput(Input):
    expected_version = StrictIntegerField(help_text="The version the proposal showed.")
    disposition = EnumField(RecoveryDisposition)
    reason_code = StrictCharField(
        help_text="1–64 bytes of A-Z 0-9 _; `UNKNOWN_EFFECT` to mark an unknown commit FAILED."
    )
    evidence_digest = DigestField(help_text="The proposal's `evidence_digest`, in full.")
    failure_category = EnumField(
        FailureCategory,
        required=False,
        help_text=(
            "MARK_FAILED only; default UNKNOWN_COMMIT with the unknown-commit marker, "
            "else STALE_RECOVERED."
        ),
    )
    failure_id = IdField(required=False, help_text="Default: generated by the server.")
    operation_id = StrictCharField(help_text="1–64 bytes of A-Z a-z 0-9 . _ : -")

    def to_domain(self) -> RecoverCommand:
        data = self.validated_data
        failure_id = data.get("failure_id")
        if failure_id is not None:
            identifier("failure_id", K.FAILURE, failure_id)
        return RecoverCommand(
            expected_version=data["expected_version"],
            disposition=data["disposition"],
            reason_code=operator_string("reason_code", REASON_CODE, data["reason_code"]),
            evidence_digest=data["evidence_digest"],
            operation_id=operator_string("operation_id", OPERATION_ID, data["operation_id"]),
            failure_category=data.get("failure_category"),
            failure_id=failure_id,
        )


class HoldInput(Input):
    reason_code = StrictCharField(help_text="1–64 bytes of A-Z 0-9 _ (e.g. LEGAL_HOLD)")
    operation_id = StrictCharField(help_text="1–64 bytes of A-Z a-z 0-9 . _ : -")

    def to_domain(self) -> tuple[str, str]:
        data = self.validated_data
        return (
            operator_string("reason_code", REASON_CODE, data["reason_code"]),
            operator_string("operation_id", OPERATION_ID, data["operation_id"]),
        )


@dataclass(frozen=True)
class SurveyCommand:
    cutoff: datetime
    job_name: str | None
    statuses: frozenset[BatchStatus]
    limit: int


class SurveyInput(Input):
    ended_before = InstantInputField(
        help_text=(
            "The cutoff (RFC 3339 with an offset): at least OXIDE_BATCH_PURGE_MIN_AGE in the past."
        )
    )
    job_name = StrictCharField(required=False, help_text="Only instances of this job.")
    statuses = serializers.ListField(
        child=EnumField(BatchStatus),
        required=False,
        max_length=8,
        help_text="Finished statuses; default STOPPED, FAILED, COMPLETED, ABANDONED.",
    )
    limit = StrictIntegerField(
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


# ------------------------------------------------------------------ operator outputs


class MarkersOutput(Output):
    unknown_commit = serializers.BooleanField(
        help_text="UNKNOWN, failure category UNKNOWN_COMMIT, or the latest step UNKNOWN."
    )
    completed_partition = serializers.BooleanField()
    committed_flow_decision = serializers.BooleanField()


class CheckpointEvidenceOutput(Output):
    schema = serializers.CharField(allow_null=True)
    schema_version = serializers.IntegerField(allow_null=True)
    size = serializers.IntegerField(help_text="UTF-8 bytes of the stored checkpoint.")
    intact = serializers.BooleanField(help_text="false when the stored checkpoint does not verify")


class LatestStepEvidenceOutput(Output):
    id = serializers.IntegerField()
    status = EnumField(BatchStatus)
    version = serializers.IntegerField()
    checkpoint = CheckpointEvidenceOutput(allow_null=True)


class EvidenceOutput(Output):
    """The evidence digest's input, exactly: SHA-256 of its canonical JSON
    (keys sorted, compact, UTF-8) is ``evidence_digest``."""

    v = serializers.CharField(help_text="The encoding's version.")
    job_execution_id = serializers.IntegerField()
    status = EnumField(BatchStatus)
    attempt = serializers.IntegerField()
    version = serializers.IntegerField()
    owner_recorded = serializers.BooleanField()
    last_activity_at = serializers.CharField(help_text="RFC 3339 UTC, milliseconds.")
    last_observed_at = serializers.CharField(allow_null=True)
    newest_step_write_at = serializers.CharField(allow_null=True)
    stop_requested_at = serializers.CharField(allow_null=True)
    latest_step = LatestStepEvidenceOutput(allow_null=True)
    markers = MarkersOutput()


class RecoveryProposalOutput(Output):
    job_execution_id = serializers.IntegerField()
    status = EnumField(BatchStatus, source="evidence.status")
    attempt = serializers.IntegerField(source="evidence.attempt")
    version = serializers.IntegerField(help_text="Send it back as `expected_version`.")
    eligible = serializers.BooleanField()
    reason_code = serializers.ChoiceField(
        choices=["recovery_not_allowed", "execution_not_stale"],
        allow_null=True,
        help_text="Why not eligible (null when eligible).",
    )
    owner_recorded = serializers.BooleanField(source="evidence.owner_recorded")
    failure_category = EnumField(
        FailureCategory, source="evidence.failure_category", allow_null=True
    )
    default_failure_category = serializers.SerializerMethodField(
        help_text="What MARK_FAILED records when `failure_category` is not sent."
    )
    last_active_at = InstantField(
        source="evidence.last_active_at",
        help_text="The latest runtime write, owner observation or step write.",
    )
    inactive_seconds = serializers.SerializerMethodField()
    threshold_seconds = serializers.SerializerMethodField(
        help_text="OXIDE_BATCH_RECOVERY_STALE_AFTER: active executions are eligible past it."
    )
    markers = serializers.SerializerMethodField()
    evidence = serializers.SerializerMethodField()
    evidence_digest = serializers.CharField(
        help_text="SHA-256 (hex) of the evidence; send it back in full to recover."
    )

    @extend_schema_field(EnumField(FailureCategory))
    def get_default_failure_category(self, proposal: RecoveryProposal) -> str:
        return default_failure_category(proposal).value

    @extend_schema_field(serializers.IntegerField())
    def get_inactive_seconds(self, proposal: RecoveryProposal) -> int:
        return int(proposal.inactive_for.total_seconds())

    @extend_schema_field(serializers.IntegerField())
    def get_threshold_seconds(self, proposal: RecoveryProposal) -> int:
        return int(proposal.threshold.total_seconds())

    @extend_schema_field(MarkersOutput())
    def get_markers(self, proposal: RecoveryProposal) -> dict[str, bool]:
        markers: dict[str, bool] = proposal.evidence.encoded()["markers"]
        return markers

    @extend_schema_field(EvidenceOutput())
    def get_evidence(self, proposal: RecoveryProposal) -> dict[str, Any]:
        return proposal.evidence.encoded()


class OperatorRecordOutput(Output):
    """One operator request audit row (APPLIED or REJECTED)."""

    id = serializers.IntegerField()
    action = EnumField(OperatorAction)
    operation_id = serializers.CharField()
    actor = serializers.CharField(help_text="The authenticated user's name (or user:<id>).")
    outcome = EnumField(RecordOutcome)
    changed = serializers.BooleanField()
    job_instance_id = serializers.IntegerField(allow_null=True)
    job_execution_id = serializers.IntegerField(allow_null=True)
    reason_code = serializers.CharField(allow_null=True)
    observed_version = serializers.IntegerField(allow_null=True)
    prior_status = EnumField(BatchStatus, allow_null=True)
    result_status = EnumField(BatchStatus, allow_null=True)
    rejection_code = serializers.CharField(
        allow_null=True, help_text="REJECTED: the problem's code."
    )
    rejection_details = serializers.DictField(
        allow_null=True, help_text="REJECTED: the problem's fields."
    )
    request_digest = serializers.CharField(help_text="Decides replays (never covers the actor).")
    requested_at = InstantField()


class RecoveryDecisionOutput(Output):
    id = serializers.IntegerField()
    job_execution_id = serializers.IntegerField()
    execution_version = serializers.IntegerField(help_text="The version the operator observed.")
    prior_status = EnumField(BatchStatus)
    resulting_status = EnumField(BatchStatus)
    reason_code = serializers.CharField()
    operator_reference = serializers.CharField()
    evidence_digest = serializers.SerializerMethodField(help_text="In full (64 hex).")
    decided_at = InstantField()

    @extend_schema_field(serializers.CharField())
    def get_evidence_digest(self, decision: RecoveryDecision) -> str:
        return decision.evidence_digest.hex()


@extend_schema_field(
    {
        "type": "string",
        "pattern": "^(APPLIED|REPLAYED)$",
        "description": "APPLIED now, or REPLAYED: the recorded outcome answered again.",
    }
)
class ResponseOutcomeField(serializers.CharField):
    """``APPLIED`` or ``REPLAYED`` (a pattern, not an enum: the audit rows'
    ``outcome`` is another choice set under the same name)."""


class OperatorResponseOutput(Output):
    """``{outcome, replayed, changed, operation_id, execution, record}``."""

    outcome = ResponseOutcomeField()
    replayed = serializers.BooleanField(help_text="true when the recorded outcome is answered.")
    changed = serializers.BooleanField(help_text="false for a no-op (nothing to change).")
    operation_id = serializers.CharField()
    execution = ExecutionOutput(
        allow_null=True,
        help_text="The execution as it is now; null only in a replay after it was purged.",
    )
    record = OperatorRecordOutput()


class RecoverResponseOutput(OperatorResponseOutput):
    decision = RecoveryDecisionOutput(
        allow_null=True,
        help_text="The recovery decision (null once audit-pruned, or its execution purged).",
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
    """One retention audit row: a hold, a release or an applied purge batch."""

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
    applied_at = InstantField()


class HoldResponseOutput(Output):
    """``{outcome, replayed, changed, operation_id, hold, record}``."""

    outcome = ResponseOutcomeField()
    replayed = serializers.BooleanField()
    changed = serializers.BooleanField()
    operation_id = serializers.CharField()
    hold = RetentionHoldOutput(allow_null=True, help_text="The hold placed; null once released.")
    record = RetentionRecordOutput()


class PurgeApplyResponseOutput(Output):
    """``{outcome, replayed, changed, operation_id, counts, record}``."""

    outcome = ResponseOutcomeField()
    replayed = serializers.BooleanField()
    changed = serializers.BooleanField()
    operation_id = serializers.CharField()
    counts = PurgeCountsOutput(help_text="Rows deleted per kind.")
    record = RetentionRecordOutput()


class ObservedExecutionOutput(Output):
    id = serializers.IntegerField()
    version = serializers.IntegerField()


class PurgeCandidateOutput(Output):
    instance_id = serializers.IntegerField()
    executions = ObservedExecutionOutput(many=True)


class PurgePlanOutput(Output):
    """A surveyed batch (SPEC §9 "Shapes"); apply takes it back whole."""

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
    shape. The domain's parser takes ``datetime.fromisoformat``'s word for the
    cutoff (which stops reading at a NUL) and never range-checks the informative
    counts, so the shape is checked here first."""
    shape = PlanDocumentInput(data=document)
    if not shape.is_valid():
        where, (first, *_) = next(iter(flatten_validation(shape.errors).items()))
        raise MalformedPurgePlan(reason=f"{where}: {first['message']}")


@extend_schema_field(PurgePlanOutput())
class PlanDocumentField(JSONObjectField):
    """A purge plan as the survey answered it (shape: :func:`check_plan_shape`)."""


class PurgeApplyInput(Input):
    reason_code = StrictCharField(
        required=False,
        help_text=f"1–64 bytes of A-Z 0-9 _; default {DEFAULT_PURGE_REASON}.",
    )
    operation_id = StrictCharField(help_text="1–64 bytes of A-Z a-z 0-9 . _ : -")
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


class AuditRecoveryDecisionOutput(Output):
    """A recovery decision in the audit list (the evidence digest as a prefix)."""

    id = serializers.IntegerField()
    job_instance_id = serializers.IntegerField()
    job_execution_id = serializers.IntegerField()
    execution_version = serializers.IntegerField()
    prior_status = EnumField(BatchStatus)
    resulting_status = EnumField(BatchStatus)
    reason_code = serializers.CharField()
    operator_reference = serializers.CharField()
    evidence_digest_prefix = serializers.SerializerMethodField(
        help_text=f"The first {DIGEST_PREFIX} hex characters of the evidence digest."
    )
    decided_at = InstantField()

    @extend_schema_field(serializers.CharField())
    def get_evidence_digest_prefix(self, row: Mapping[str, Any]) -> str:
        return str(row["evidence_digest"])[:DIGEST_PREFIX]


class AuditRecoveryDecisionPageOutput(PageOutput):
    results = AuditRecoveryDecisionOutput(many=True)


class OperatorRecordPageOutput(PageOutput):
    results = OperatorRecordOutput(many=True)


class RetentionRecordPageOutput(PageOutput):
    results = RetentionRecordOutput(many=True)


def operator_data(
    result: OperatorResult, execution: ExecutionRecord | None, *, recover: bool = False
) -> dict[str, Any]:
    """An operator service's result as the endpoint answers it (``recover``: with
    the recovery decision)."""
    document: dict[str, Any] = {
        "outcome": result.outcome.value,
        "replayed": result.outcome is Outcome.REPLAYED,
        "changed": result.changed,
        "operation_id": result.operation_id,
        "execution": execution,
        "record": result.record,
    }
    if recover:
        document["decision"] = result.decision
        data: dict[str, Any] = RecoverResponseOutput(document).data
    else:
        data = OperatorResponseOutput(document).data
    return data


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


def _name_components() -> None:
    """OpenAPI component names without the ``Input``/``Output`` suffix
    (``ExecutionOutput`` → ``Execution``; request bodies get ``Request`` appended)."""
    pending: list[type[Any]] = [Input, Output]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        for suffix in ("Input", "Output", "Query"):
            if cls.__name__.endswith(suffix) and cls.__name__ != suffix:
                cls.Meta = type("Meta", (), {"ref_name": cls.__name__.removesuffix(suffix)})


_name_components()
