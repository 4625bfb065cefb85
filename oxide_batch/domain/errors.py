"""One typed error hierarchy for the whole product.

Every error carries a stable snake_case ``code`` (the seed variant's name) and
structured fields; HTTP statuses, admin messages and command exit codes are
mapped from the class at the edges, each in one place. Messages follow the
seed's wording and never contain parameter values, payloads or tokens.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from dataclasses import dataclass
from typing import Any, ClassVar

from oxide_batch.domain.status import BatchStatus, FailureCategory


@dataclass(eq=False)
class OxideBatchError(Exception):
    """Base of every error the domain, repository and services raise."""

    code: ClassVar[str] = "oxide_batch_error"

    def __post_init__(self) -> None:
        Exception.__init__(self, self.message)

    @property
    def message(self) -> str:
        return self.code.replace("_", " ")

    def __str__(self) -> str:
        return self.message

    def details(self) -> dict[str, Any]:
        """The structured fields, JSON-ready (enums as their durable codes); an
        optional field (one that defaults to ``None``) is left out while unset."""
        return {
            field.name: _plain(value)
            for field in dataclasses.fields(self)
            if (value := getattr(self, field.name)) is not None or field.default is not None
        }


def _plain(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    return value


# --------------------------------------------------------------------------- domain


class DomainError(OxideBatchError):
    """A domain value could not be constructed (input-shaped)."""


@dataclass(eq=False)
class EmptyName(DomainError):
    code: ClassVar[str] = "empty_name"
    kind: str

    @property
    def message(self) -> str:
        return f"{self.kind} must not be empty"


@dataclass(eq=False)
class NameTooLong(DomainError):
    code: ClassVar[str] = "name_too_long"
    kind: str
    max_bytes: int

    @property
    def message(self) -> str:
        return f"{self.kind} exceeds {self.max_bytes} UTF-8 bytes"


@dataclass(eq=False)
class NameHasSurroundingWhitespace(DomainError):
    code: ClassVar[str] = "name_has_surrounding_whitespace"
    kind: str

    @property
    def message(self) -> str:
        return f"{self.kind} has surrounding whitespace"


@dataclass(eq=False)
class NameContainsControl(DomainError):
    code: ClassVar[str] = "name_contains_control"
    kind: str
    character_index: int

    @property
    def message(self) -> str:
        return f"{self.kind} contains a control character at index {self.character_index}"


@dataclass(eq=False)
class NameContainsInvisible(DomainError):
    """A name holding a character that changes how the text around it is shown
    without being seen itself (decision 201): a step beyond the seed's rule."""

    code: ClassVar[str] = "name_contains_invisible"
    kind: str
    character_index: int

    @property
    def message(self) -> str:
        return (
            f"{self.kind} contains an invisible character at index {self.character_index} "
            "(a Unicode format character such as a bidi control, a zero-width character "
            "or the BOM, or a line or paragraph separator)"
        )


@dataclass(eq=False)
class InvalidCharacters(DomainError):
    """An operator string outside its character set (actor, reason code, operation id)."""

    code: ClassVar[str] = "invalid_characters"
    kind: str
    allowed: str

    @property
    def message(self) -> str:
        return f"{self.kind} may only contain {self.allowed}"


@dataclass(eq=False)
class InvalidSkipItem(DomainError):
    """A skipped item's key or ordinal that is not 1..256 UTF-8 bytes of
    visible characters (contract §2.3.3)."""

    code: ClassVar[str] = "invalid_skip_item"
    max_bytes: int

    @property
    def message(self) -> str:
        return (
            f"a skipped item is named by 1 to {self.max_bytes} UTF-8 bytes of visible "
            "characters, without surrounding whitespace"
        )


@dataclass(eq=False)
class ZeroIdentifier(DomainError):
    code: ClassVar[str] = "zero_identifier"
    kind: str

    @property
    def message(self) -> str:
        return f"{self.kind} identifier must be positive"


@dataclass(eq=False)
class DuplicateParameter(DomainError):
    code: ClassVar[str] = "duplicate_parameter"

    @property
    def message(self) -> str:
        # The name is redacted: parameter names can be sensitive too.
        return "job parameters contain a duplicate name"


@dataclass(eq=False)
class ParameterStringTooLong(DomainError):
    code: ClassVar[str] = "parameter_string_too_long"
    max_bytes: int

    @property
    def message(self) -> str:
        return f"string parameter value exceeds {self.max_bytes} UTF-8 bytes"


@dataclass(eq=False)
class InvalidParameterValue(DomainError):
    """A parameter value of the wrong type or out of its type's range."""

    code: ClassVar[str] = "invalid_parameter_value"
    reason: str

    @property
    def message(self) -> str:
        return f"invalid parameter value: {self.reason}"


@dataclass(eq=False)
class InvalidEnvelope(DomainError):
    """A checkpoint, context or partition context that is not a valid envelope."""

    code: ClassVar[str] = "invalid_envelope"
    kind: str
    reason: str

    @property
    def message(self) -> str:
        return f"invalid {self.kind}: {self.reason}"


@dataclass(eq=False)
class InvalidManifest(DomainError):
    """A definition manifest that cannot be canonicalised or read as a plan."""

    code: ClassVar[str] = "invalid_manifest"
    reason: str

    @property
    def message(self) -> str:
        return f"invalid manifest: {self.reason}"


@dataclass(eq=False)
class InvalidUpgradeEdge(DomainError):
    """An upgrade edge that maps nothing, repeats a step, or points at itself."""

    code: ClassVar[str] = "invalid_upgrade_edge"
    reason: str

    @property
    def message(self) -> str:
        return f"invalid definition upgrade: {self.reason}"


@dataclass(eq=False)
class InvalidStartLimit(DomainError):
    """A start limit that is not a positive integer (the seed's ``ZeroStartLimit``)."""

    code: ClassVar[str] = "invalid_start_limit"
    maximum: int

    @property
    def message(self) -> str:
        return f"a start limit is an integer from 1 to {self.maximum}"


@dataclass(eq=False)
class PartitionRestartMismatch(DomainError):
    """A plan restart whose source step is of another node or job instance than its
    target. Input-shaped: node and instance of a step never change, so the same
    request can never succeed (400, attributed to ``source_step_execution_id``)."""

    code: ClassVar[str] = "partition_restart_mismatch"
    source_step_execution_id: int
    target_step_execution_id: int

    @property
    def message(self) -> str:
        return (
            f"step execution {self.source_step_execution_id} is of another node or job "
            f"instance than step execution {self.target_step_execution_id}"
        )


@dataclass(eq=False)
class InvalidTimestampOrder(DomainError):
    code: ClassVar[str] = "invalid_timestamp_order"

    @property
    def message(self) -> str:
        return "execution timestamps must satisfy created <= started <= ended"


@dataclass(eq=False)
class ActiveExecutionHasEndTime(DomainError):
    code: ClassVar[str] = "active_execution_has_end_time"

    @property
    def message(self) -> str:
        return "an active or UNKNOWN execution cannot have an end time"


@dataclass(eq=False)
class FinishedExecutionMissingEndTime(DomainError):
    code: ClassVar[str] = "finished_execution_missing_end_time"

    @property
    def message(self) -> str:
        return "a finished execution requires an end time"


@dataclass(eq=False)
class FailedExecutionMissingFailure(DomainError):
    code: ClassVar[str] = "failed_execution_missing_failure"

    @property
    def message(self) -> str:
        return "a FAILED execution requires a failure summary"


@dataclass(eq=False)
class RecoveryRequestInvalid(DomainError):
    """Seed ``RecoveryRequestError``: one class per variant below, sharing ``field``."""

    field: str


@dataclass(eq=False)
class RecoveryFieldEmpty(RecoveryRequestInvalid):
    code: ClassVar[str] = "recovery_field_empty"

    @property
    def message(self) -> str:
        return f"{self.field} must not be empty"


@dataclass(eq=False)
class RecoveryFieldTooLong(RecoveryRequestInvalid):
    code: ClassVar[str] = "recovery_field_too_long"
    max_bytes: int

    @property
    def message(self) -> str:
        return f"{self.field} exceeds {self.max_bytes} bytes"


@dataclass(eq=False)
class RecoveryFieldSurroundingWhitespace(RecoveryRequestInvalid):
    code: ClassVar[str] = "recovery_field_surrounding_whitespace"

    @property
    def message(self) -> str:
        return f"{self.field} has surrounding whitespace"


@dataclass(eq=False)
class RecoveryFieldControlCharacter(RecoveryRequestInvalid):
    code: ClassVar[str] = "recovery_field_control_character"

    @property
    def message(self) -> str:
        return f"{self.field} contains a control character"


# ------------------------------------------------------------------------ lifecycle


class LifecycleError(OxideBatchError):
    """A lifecycle or optimistic-version rule rejected an update."""


@dataclass(eq=False)
class StaleVersion(LifecycleError):
    code: ClassVar[str] = "stale_version"
    expected: int
    actual: int

    @property
    def message(self) -> str:
        return (
            f"expected version {self.expected} but the stored version is {self.actual}: "
            "someone else wrote it since you read it; re-read it, and if your change "
            f"still applies, send it again with expected_version {self.actual}"
        )


@dataclass(eq=False)
class VersionAhead(LifecycleError):
    """The caller expects a version *ahead* of the stored one: it saw a write the
    repository no longer has — an acknowledged write was lost (a failover to a
    standby that had not received it, a restored backup). Not a conflict to
    re-read past, as ``StaleVersion`` is: continuing would redo or skip work
    from an older checkpoint. The refusal marks the execution (``job_execution_id``)
    with a lost write, which counts as the unknown-commit marker: an operator
    decides (``UNKNOWN_EFFECT``)."""

    code: ClassVar[str] = "version_ahead"
    expected: int
    actual: int
    job_execution_id: int | None = None

    @property
    def message(self) -> str:
        return (
            f"expected version {self.expected} is ahead of the stored version {self.actual}: "
            "the repository may have lost an acknowledged write (e.g. after a database "
            "failover); the execution is marked and an operator must decide (UNKNOWN_EFFECT)"
        )


@dataclass(eq=False)
class IllegalTransition(LifecycleError):
    """A pair the lifecycle table refuses; ``allowed`` lists the statuses the row
    may move to from where it is (durable codes, table order), so the caller
    knows the way out (``None`` in refusals recorded before it existed)."""

    code: ClassVar[str] = "illegal_transition"
    from_status: BatchStatus
    to_status: BatchStatus
    allowed: list[str] | None = None

    @property
    def message(self) -> str:
        refused = (
            f"transition from {self.from_status.value} to {self.to_status.value} is not allowed"
        )
        if self.allowed is None:
            return refused
        if not self.allowed:
            return f"{refused}: {self.from_status.value} allows no further transition"
        return f"{refused}; from {self.from_status.value} it may move to {', '.join(self.allowed)}"


@dataclass(eq=False)
class RestartRequiresNewAttempt(LifecycleError):
    code: ClassVar[str] = "restart_requires_new_attempt"
    from_status: BatchStatus

    @property
    def message(self) -> str:
        return f"a {self.from_status.value} execution restarts only as a new attempt"


@dataclass(eq=False)
class NotRestartable(LifecycleError):
    """An attempt (or, with ``step_name``, a step of a restart attempt) that may
    not be restarted from its earlier row in ``status`` (contract §2.3.2: a restart
    skips what completed): COMPLETED and ABANDONED steps are skipped, an UNKNOWN one
    waits for an operator. ``step_execution_id`` is the earlier row."""

    code: ClassVar[str] = "not_restartable"
    status: BatchStatus
    step_name: str | None = None
    step_execution_id: int | None = None

    @property
    def message(self) -> str:
        if self.step_name is None:
            return f"an execution in {self.status.value} cannot be restarted"
        earlier = f"step {self.step_name!r} is {self.status.value} in an earlier attempt"
        if self.step_execution_id is not None:
            earlier += f" (step execution {self.step_execution_id})"
        if self.status is BatchStatus.COMPLETED:
            return (
                f"{earlier}: a restart skips it; to run it again from the start, create it "
                "with allow_start_if_complete: true"
            )
        if self.status is BatchStatus.ABANDONED:
            return f"{earlier}: a restart skips it"
        return (
            f"{earlier}: its last commit may or may not have applied, so it must be resolved "
            "first — by an operator's recovery of its execution with the reason "
            "UNKNOWN_EFFECT while that is UNKNOWN, else by moving the step to FAILED once "
            "what it wrote was checked"
        )


@dataclass(eq=False)
class FailedTransitionMissingFailure(LifecycleError):
    code: ClassVar[str] = "failed_transition_missing_failure"

    @property
    def message(self) -> str:
        return "a transition to FAILED requires a failure summary"


@dataclass(eq=False)
class InvalidTransitionTime(LifecycleError):
    code: ClassVar[str] = "invalid_transition_time"

    @property
    def message(self) -> str:
        return "the transition instant precedes the execution's start, creation or end"


@dataclass(eq=False)
class CountExhausted(LifecycleError):
    code: ClassVar[str] = "count_exhausted"

    @property
    def message(self) -> str:
        return "an execution counter would exceed 2^63-1"


@dataclass(eq=False)
class VersionExhausted(LifecycleError):
    code: ClassVar[str] = "version_exhausted"
    version: int

    @property
    def message(self) -> str:
        return f"execution version {self.version} cannot be incremented"


# ----------------------------------------------------------------------- repository


class RepositoryError(OxideBatchError):
    """A stable repository failure, independent of the database."""


class NotFound(RepositoryError):
    """A referenced row does not exist."""


@dataclass(eq=False)
class SchemaUninitialized(RepositoryError):
    code: ClassVar[str] = "schema_uninitialized"

    @property
    def message(self) -> str:
        return "metadata schema is not initialized"


@dataclass(eq=False)
class MigrationRequired(RepositoryError):
    code: ClassVar[str] = "migration_required"
    current: int
    supported: int

    @property
    def message(self) -> str:
        return f"metadata schema version {self.current} requires migration to {self.supported}"


@dataclass(eq=False)
class NewerSchema(RepositoryError):
    code: ClassVar[str] = "newer_schema"
    current: int
    supported: int

    @property
    def message(self) -> str:
        return (
            f"metadata schema version {self.current} is newer than "
            f"supported version {self.supported}"
        )


@dataclass(eq=False)
class IdentifierOutOfRange(RepositoryError):
    code: ClassVar[str] = "identifier_out_of_range"
    kind: str
    value: int

    @property
    def message(self) -> str:
        return f"{self.kind} identifier {self.value} exceeds PostgreSQL bigint"


@dataclass(eq=False)
class JobInstanceNotFound(NotFound):
    code: ClassVar[str] = "job_instance_not_found"
    id: int

    @property
    def message(self) -> str:
        return f"job instance {self.id} was not found"


@dataclass(eq=False)
class JobExecutionNotFound(NotFound):
    code: ClassVar[str] = "job_execution_not_found"
    id: int

    @property
    def message(self) -> str:
        return f"job execution {self.id} was not found"


@dataclass(eq=False)
class StepExecutionNotFound(NotFound):
    code: ClassVar[str] = "step_execution_not_found"
    id: int

    @property
    def message(self) -> str:
        return f"step execution {self.id} was not found"


@dataclass(eq=False)
class StepPartitionNotFound(NotFound):
    code: ClassVar[str] = "step_partition_not_found"
    id: int

    @property
    def message(self) -> str:
        return f"step partition {self.id} was not found"


@dataclass(eq=False)
class ApiTokenNotFound(NotFound):
    """No API token has this prefix (the listed, non-secret part of a token)."""

    code: ClassVar[str] = "api_token_not_found"
    key_prefix: str

    @property
    def message(self) -> str:
        return f"no API token has the prefix {self.key_prefix!r}"


@dataclass(eq=False)
class UserNotFound(NotFound):
    code: ClassVar[str] = "user_not_found"
    username: str

    @property
    def message(self) -> str:
        return f"no user is named {self.username!r}"


@dataclass(eq=False)
class GroupNotFound(NotFound):
    code: ClassVar[str] = "group_not_found"
    name: str

    @property
    def message(self) -> str:
        return f"no group is named {self.name!r}"


@dataclass(eq=False)
class EmptyPartitionPlan(RepositoryError):
    code: ClassVar[str] = "empty_partition_plan"

    @property
    def message(self) -> str:
        return "partition plan must contain at least one entry"


@dataclass(eq=False)
class PartitionPlanTooLarge(RepositoryError):
    code: ClassVar[str] = "partition_plan_too_large"
    max: int

    @property
    def message(self) -> str:
        return f"partition plan exceeds {self.max} entries"


@dataclass(eq=False)
class SkipNotEligible(RepositoryError):
    """A skip ledger entry whose failure category no fault policy may skip
    (``FailureCategory.is_policy_eligible``; contract §2.3.3, decision 402):
    input-shaped (400), the whole chunk commit refused, nothing written."""

    code: ClassVar[str] = "skip_not_eligible"
    index: int
    category: str

    @property
    def message(self) -> str:
        eligible = ", ".join(c.value for c in FailureCategory if c.is_policy_eligible)
        return (
            f"skips.{self.index}: the failure category {self.category} is never skipped "
            f"(a fault policy may skip only {eligible})"
        )


@dataclass(eq=False)
class DuplicatePartitionKey(RepositoryError):
    code: ClassVar[str] = "duplicate_partition_key"

    @property
    def message(self) -> str:
        return "partition plan contains a duplicate key"


@dataclass(eq=False)
class PartitionPlanExists(RepositoryError):
    code: ClassVar[str] = "partition_plan_exists"
    step_execution_id: int

    @property
    def message(self) -> str:
        return f"step execution {self.step_execution_id} already has a partition plan"


@dataclass(eq=False)
class PartitionPlanNotCommitted(RepositoryError):
    code: ClassVar[str] = "partition_plan_not_committed"
    step_execution_id: int

    @property
    def message(self) -> str:
        return (
            f"step execution {self.step_execution_id} partition plan must commit before assignment"
        )


@dataclass(eq=False)
class PartitionUpdateNotAllowed(RepositoryError):
    code: ClassVar[str] = "partition_update_not_allowed"
    id: int
    status: BatchStatus

    @property
    def message(self) -> str:
        return f"step partition {self.id} cannot be updated from {self.status.value}"


@dataclass(eq=False)
class PartitionWorkerMismatch(RepositoryError):
    code: ClassVar[str] = "partition_worker_mismatch"
    partition_id: int
    worker_step_execution_id: int

    @property
    def message(self) -> str:
        return (
            f"worker step execution {self.worker_step_execution_id} does not belong to "
            f"partition {self.partition_id}"
        )


@dataclass(eq=False)
class PartitionWorkerAlreadyAssigned(RepositoryError):
    code: ClassVar[str] = "partition_worker_already_assigned"
    worker_step_execution_id: int

    @property
    def message(self) -> str:
        return (
            f"worker step execution {self.worker_step_execution_id} is already assigned "
            "to a partition"
        )


@dataclass(eq=False)
class PartitionWorkerStale(RepositoryError):
    code: ClassVar[str] = "partition_worker_stale"
    partition_id: int
    worker_step_execution_id: int

    @property
    def message(self) -> str:
        return (
            f"worker step execution {self.worker_step_execution_id} is not the current "
            f"worker for partition {self.partition_id}"
        )


@dataclass(eq=False)
class PartitionParentNotActive(RepositoryError):
    code: ClassVar[str] = "partition_parent_not_active"
    step_execution_id: int
    status: BatchStatus

    @property
    def message(self) -> str:
        return (
            f"partition parent step execution {self.step_execution_id} cannot mutate "
            f"children from {self.status.value}"
        )


@dataclass(eq=False)
class PartitionAggregationIncomplete(RepositoryError):
    code: ClassVar[str] = "partition_aggregation_incomplete"
    step_execution_id: int
    status: BatchStatus

    @property
    def message(self) -> str:
        return (
            f"step execution {self.step_execution_id} cannot aggregate a child "
            f"in {self.status.value}"
        )


@dataclass(eq=False)
class PartitionStateCorrupt(RepositoryError):
    code: ClassVar[str] = "partition_state_corrupt"

    @property
    def message(self) -> str:
        return "durable partition state is unusable and no work may begin"


@dataclass(eq=False)
class CompletedInstance(RepositoryError):
    code: ClassVar[str] = "completed_instance"
    id: int

    @property
    def message(self) -> str:
        return (
            f"job instance {self.id} is already completed and is never run again: "
            "to run the job again, use new identifying parameters (a new instance)"
        )


@dataclass(eq=False)
class AbandonedInstance(RepositoryError):
    code: ClassVar[str] = "abandoned_instance"
    id: int

    @property
    def message(self) -> str:
        return f"job instance {self.id} is abandoned"


@dataclass(eq=False)
class ExecutionAlreadyActive(RepositoryError):
    """A launch while an attempt is unresolved. Beyond the attempt and its status
    it says what the operator needs to decide: when it was last active (contract §2.5.3,
    RFC 3339), whether an owner holds it and until when (``lease_expires_at``),
    and the way out (``next_step``). The optional fields are ``None`` in refusals
    recorded before they existed."""

    code: ClassVar[str] = "execution_already_active"
    instance_id: int
    execution_id: int
    status: BatchStatus
    last_activity_at: str | None = None
    owner_recorded: bool | None = None
    lease_expires_at: str | None = None
    next_step: str | None = None

    @property
    def message(self) -> str:
        text = (
            f"job instance {self.instance_id} already has execution {self.execution_id} "
            f"in {self.status.value}"
        )
        if self.last_activity_at is not None:
            text += f", last active at {self.last_activity_at}"
        if self.lease_expires_at is not None:
            text += f", its owner's lease expires at {self.lease_expires_at}"
        elif self.owner_recorded is False:
            text += ", with no owner recorded"
        return text if self.next_step is None else f"{text}: {self.next_step}"


@dataclass(eq=False)
class LostWriteUnresolved(RepositoryError):
    """A launch or restart of an instance one of whose executions carries a
    lost-write marker no operator resolved (contract §2.5.14): resuming would
    start from a checkpoint older than what the runtime did. An operator
    decides first, whatever that execution's status."""

    code: ClassVar[str] = "lost_write_unresolved"
    instance_id: int
    execution_id: int

    @property
    def message(self) -> str:
        return (
            f"execution {self.execution_id} of job instance {self.instance_id} lost an "
            "acknowledged write and no operator has resolved it: check the target system, "
            f"then POST executions/{self.execution_id}/lost-write/resolve (or manage.py "
            f"batch_recover {self.execution_id} --resolve-lost-write --note …) before a "
            "launch or restart"
        )


@dataclass(eq=False)
class DefinitionDrift(RepositoryError):
    code: ClassVar[str] = "definition_drift"
    job_name: str
    revision: str

    @property
    def message(self) -> str:
        return f"job {self.job_name} definition revision {self.revision} has drifted"


@dataclass(eq=False)
class DefinitionJobMismatch(RepositoryError):
    code: ClassVar[str] = "definition_job_mismatch"
    expected: str
    actual: str

    @property
    def message(self) -> str:
        return f"definition for job {self.actual} cannot be used for job {self.expected}"


@dataclass(eq=False)
class IncompatibleDefinition(RepositoryError):
    code: ClassVar[str] = "incompatible_definition"
    instance_id: int

    @property
    def message(self) -> str:
        return f"job instance {self.instance_id} has no direct compatible definition"


@dataclass(eq=False)
class UnsupportedManifestVersion(RepositoryError):
    code: ClassVar[str] = "unsupported_manifest_version"
    format: int

    @property
    def message(self) -> str:
        return f"definition manifest format {self.format} is unsupported"


@dataclass(eq=False)
class InvalidDefinitionUpgrade(RepositoryError):
    code: ClassVar[str] = "invalid_definition_upgrade"
    execution_id: int

    @property
    def message(self) -> str:
        return f"definition upgrade for execution {self.execution_id} is incomplete"


@dataclass(eq=False)
class DefinitionUpgradeConflict(RepositoryError):
    code: ClassVar[str] = "definition_upgrade_conflict"
    job_name: str

    @property
    def message(self) -> str:
        return f"job {self.job_name} definition upgrade conflicts"


@dataclass(eq=False)
class RestartStateNotFound(RepositoryError):
    code: ClassVar[str] = "restart_state_not_found"
    execution_id: int
    step_name: str

    @property
    def message(self) -> str:
        return (
            f"restart execution {self.execution_id} has no durable source for step {self.step_name}"
        )


@dataclass(eq=False)
class FaultStateCorrupt(RepositoryError):
    code: ClassVar[str] = "fault_state_corrupt"

    @property
    def message(self) -> str:
        return "durable fault state is unusable and no work may begin"


@dataclass(eq=False)
class StartLimitExceeded(RepositoryError):
    code: ClassVar[str] = "start_limit_exceeded"
    instance_id: int
    node_id: str
    limit: int

    @property
    def message(self) -> str:
        return (
            f"job instance {self.instance_id} exhausted start limit {self.limit} "
            f"for node {self.node_id}"
        )


@dataclass(eq=False)
class FlowStateCorrupt(RepositoryError):
    code: ClassVar[str] = "flow_state_corrupt"

    @property
    def message(self) -> str:
        return "durable flow history is unusable and no work may begin"


@dataclass(eq=False)
class RecoveryNotAllowed(RepositoryError):
    code: ClassVar[str] = "recovery_not_allowed"
    id: int
    status: BatchStatus

    @property
    def message(self) -> str:
        return f"job execution {self.id} in {self.status.value} cannot be recovered"


@dataclass(eq=False)
class ExecutionOwned(RepositoryError):
    """Another owner holds the execution: another token was claimed
    (``other_user`` false or ``None``), or another runtime user's token claimed it
    and only that user may write to it and anything under it (``other_user``
    true, contract §2.5.2)."""

    code: ClassVar[str] = "execution_owned"
    id: int
    other_user: bool | None = None

    @property
    def message(self) -> str:
        if self.other_user:
            return (
                f"job execution {self.id} was claimed by another runtime user: only the "
                "claimant's token may write to it, its steps, partitions and flow decisions"
            )
        return f"job execution {self.id} is owned by another process"


@dataclass(eq=False)
class ExecutionOwnershipNotAllowed(RepositoryError):
    code: ClassVar[str] = "execution_ownership_not_allowed"
    id: int
    status: BatchStatus

    @property
    def message(self) -> str:
        return f"job execution {self.id} in {self.status.value} cannot acquire process ownership"


@dataclass(eq=False)
class RetentionPlanStale(RepositoryError):
    code: ClassVar[str] = "retention_plan_stale"

    @property
    def message(self) -> str:
        return "the purge plan is stale and nothing was deleted"


@dataclass(eq=False)
class UnsupportedCapability(RepositoryError):
    code: ClassVar[str] = "unsupported_capability"
    capability: enum.Enum

    @property
    def message(self) -> str:
        return f"the adapter does not support {self.capability.value}"


@dataclass(eq=False)
class DefinitionNotFound(NotFound):
    """contract §2.2.3: an unknown definition digest."""

    code: ClassVar[str] = "definition_not_found"
    digest: str

    @property
    def message(self) -> str:
        return f"definition {self.digest[:12]}… was not found"


@dataclass(eq=False)
class OperationIdConflict(RepositoryError):
    """The operation id was already used for a different request."""

    code: ClassVar[str] = "operation_id_conflict"
    action: str
    operation_id: str

    @property
    def message(self) -> str:
        return f"operation id {self.operation_id} was already used for another {self.action}"


@dataclass(eq=False)
class ExecutionNotStale(RepositoryError):
    """Recovery of an active execution that is not inactive long enough: without
    an owner, ``threshold_seconds`` is the stale threshold; with one, it is the
    lease TTL and ``lease_expires_at`` (RFC 3339) when the lease runs out (contract
    §2.5.3). An operator who knows the worker is gone may override (with a note)."""

    code: ClassVar[str] = "execution_not_stale"
    id: int
    inactive_seconds: int
    threshold_seconds: int
    lease_expires_at: str | None = None

    @property
    def message(self) -> str:
        if self.lease_expires_at is not None:
            return (
                f"job execution {self.id} was active {self.inactive_seconds}s ago and its "
                f"owner's lease runs until {self.lease_expires_at}; recovery needs the lease "
                "to expire, or an operator's override with a note"
            )
        return (
            f"job execution {self.id} was active {self.inactive_seconds}s ago; recovery "
            f"needs more than {self.threshold_seconds}s of inactivity, or an operator's "
            "override with a note"
        )


@dataclass(eq=False)
class RecoveryEvidenceStale(RepositoryError):
    """The evidence changed since the proposal the operator saw."""

    code: ClassVar[str] = "recovery_evidence_stale"
    id: int

    @property
    def message(self) -> str:
        return f"the recovery evidence of job execution {self.id} changed; read a new proposal"


@dataclass(eq=False)
class UnresolvedRecoveryRequired(RepositoryError):
    """MARK_FAILED of an unknown commit needs the reason UNKNOWN_EFFECT."""

    code: ClassVar[str] = "unresolved_recovery_required"
    id: int

    @property
    def message(self) -> str:
        return (
            f"job execution {self.id} may have committed an unknown effect: marking it "
            "FAILED needs the reason code UNKNOWN_EFFECT"
        )


@dataclass(eq=False)
class StepExecutionExists(RepositoryError):
    """contract §2.3.1: a repeated step name within one job execution."""

    code: ClassVar[str] = "step_execution_exists"
    job_execution_id: int
    step_name: str

    @property
    def message(self) -> str:
        return f"job execution {self.job_execution_id} already has step {self.step_name}"


@dataclass(eq=False)
class InvalidState(RepositoryError):
    """contract §4.6: an operation on a row whose status does not allow it. ``hint``
    says what comes first or what it means (``None``: nothing to add)."""

    code: ClassVar[str] = "invalid_state"
    id: int
    status: BatchStatus
    hint: str | None = None

    @property
    def message(self) -> str:
        text = f"execution {self.id} in {self.status.value} does not allow this operation"
        return text if self.hint is None else f"{text}: {self.hint}"


@dataclass(eq=False)
class JobNotPermitted(RepositoryError):
    """A token limited to some job names (``batch_token create --job PATTERN``)
    used on another job (contract §4.1): 403, naming the job and the token's patterns."""

    code: ClassVar[str] = "job_not_permitted"
    job_name: str
    patterns: list[str]

    @property
    def message(self) -> str:
        allowed = ", ".join(repr(pattern) for pattern in self.patterns)
        return (
            f"this token is limited to jobs matching {allowed} and may not touch "
            f"job {self.job_name!r}"
        )


# ---------------------------------------------------------------- infrastructure


@dataclass(eq=False)
class ConcurrentModification(RepositoryError):
    code: ClassVar[str] = "concurrent_modification"

    @property
    def message(self) -> str:
        return "repository unit of work is based on a stale snapshot"


@dataclass(eq=False)
class CommitOutcomeUnknown(RepositoryError):
    code: ClassVar[str] = "commit_outcome_unknown"

    @property
    def message(self) -> str:
        return "commit outcome is unknown; inspect durable metadata before retrying"


@dataclass(eq=False)
class Unavailable(RepositoryError):
    code: ClassVar[str] = "unavailable"

    @property
    def message(self) -> str:
        return "repository is unavailable"


def error_classes() -> dict[str, type[OxideBatchError]]:
    """Every concrete error class by its ``code``."""
    found: dict[str, type[OxideBatchError]] = {}
    pending: list[type[OxideBatchError]] = [OxideBatchError]
    while pending:
        cls = pending.pop()
        pending.extend(cls.__subclasses__())
        if "code" in vars(cls):
            found[cls.code] = cls
    return found


def rebuild_error(code: str, details: dict[str, Any]) -> OxideBatchError:
    """The error ``code`` with ``details`` (as ``details()`` gave them), e.g. to
    replay a recorded refusal as the same problem."""
    cls = error_classes()[code]
    hints = typing.get_type_hints(cls)
    values = {}
    for field in dataclasses.fields(cls):
        value = details.get(field.name)
        if hints.get(field.name) is BatchStatus and value is not None:
            value = BatchStatus(value)
        values[field.name] = value
    return cls(**values)
