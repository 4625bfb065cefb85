"""Job executions: launch, CAS transitions, exit status, ownership and control."""

from __future__ import annotations

from typing import Any

from django.core.validators import ProhibitNullCharactersValidator
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers
from rest_framework.validators import ProhibitSurrogateCharactersValidator

from oxide_batch.api.fields import (
    DigestField,
    EnumField,
    IdField,
    InstantField,
    NameField,
    OwnerTokenField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
)
from oxide_batch.api.logs import execution_logs
from oxide_batch.api.serializers.base import Input, K, Output, PageOutput, at, identifier, name
from oxide_batch.api.serializers.worker import WorkerOutput, worker_field, worker_value
from oxide_batch.domain.execution import FailureSummary
from oxide_batch.domain.failure_detail import (
    MESSAGE_MAX_BYTES,
    TRACEBACK_MAX_BYTES,
    TYPE_MAX_BYTES,
    FailureDetail,
)
from oxide_batch.domain.lifecycle import LifecycleTransition
from oxide_batch.domain.names import NameKind, parse_owner_token
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.domain.worker import WorkerIdentity


class LaunchInput(Input):
    definition_digest = DigestField(
        required=False,
        help_text="Bind the attempt to this definition; default: the latest attempt's.",
    )

    def to_domain(self) -> str | None:
        digest: str | None = self.validated_data.get("definition_digest")
        return digest


CARRIED_OWNER_HELP = (
    "The owner token this runtime claimed with (32 lowercase hex): a write carrying "
    "another token than the one recorded is `execution_owned`, and the answer then "
    "carries the execution's `control` state."
)


def carried_owner_token(data: dict[str, Any]) -> bytes | None:
    """The owner token a runtime write carries (``None``: none)."""
    raw = data.get("owner_token")
    if raw is None:
        return None
    with at("owner_token"):
        return parse_owner_token(raw)


def carried_owner_field() -> OwnerTokenField:
    """The owner token a runtime write may carry (:func:`carried_owner_token` reads it)."""
    return OwnerTokenField(required=False, allow_null=True, help_text=CARRIED_OWNER_HELP)


def optional_exit_code_field(help_text: str) -> NameField:
    """An exit code a write may store with its change (:func:`optional_exit_code` reads it)."""
    return NameField(NameKind.EXIT_CODE, required=False, allow_null=True, help_text=help_text)


def optional_exit_code(data: dict[str, Any]) -> str | None:
    raw = data.get("exit_code")
    return None if raw is None else name("exit_code", NameKind.EXIT_CODE, raw)


class DetailTextField(StrictCharField):
    """A string of a failure's detail: any text (NUL, control characters and lone
    surrogates included) — the domain stores them as U+FFFD: a runtime reporting
    a failure is never refused for what its exception said (decision 305)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.validators = [
            validator
            for validator in self.validators
            if not isinstance(
                validator, ProhibitNullCharactersValidator | ProhibitSurrogateCharactersValidator
            )
        ]


def detail_text_field(max_bytes: int, help_text: str) -> DetailTextField:
    return DetailTextField(
        required=False,
        allow_null=True,
        help_text=(
            f"{help_text} Kept up to {max_bytes} UTF-8 bytes (longer: cut at a character "
            "boundary, ending `… [truncated N bytes]`); secrets scrubbed before it is stored; "
            "control characters but newline and tab stored as U+FFFD."
        ),
    )


# contract §2, "Failure detail" (decisions 300-306).
class FailureDetailInput(Input):
    """What the runtime knows of the failure: each member optional. Kept as the
    deployment's `OXIDE_BATCH_FAILURE_DETAIL` allows (`off`: nothing; `message`,
    the default: type and message; `traceback`: all three), scrubbed of secret
    shapes, of the deployment's patterns and of the instance's hidden parameter
    values."""

    type = detail_text_field(
        TYPE_MAX_BYTES, "The exception's type (its qualified name, e.g. `builtins.ValueError`)."
    )
    message = detail_text_field(MESSAGE_MAX_BYTES, "The exception's message.")
    traceback = detail_text_field(TRACEBACK_MAX_BYTES, "The formatted traceback (or stack).")


class FailureInput(Input):
    category = EnumField(FailureCategory)
    failure_id = IdField()
    detail = FailureDetailInput(required=False, allow_null=True)


class CarriesOwnerToken(Input):
    """A runtime write that may carry the owner token (its answer then has ``control``)."""

    owner_token = carried_owner_field()

    def owner_token_value(self) -> bytes | None:
        return carried_owner_token(self.validated_data)


class TransitionInput(Input):
    expected_version = StrictIntegerField()
    status = EnumField(BatchStatus)
    failure = FailureInput(required=False, allow_null=True)
    terminal_rollback = StrictBooleanField(required=False, default=False)
    exit_code = optional_exit_code_field(
        "Stored by the same write (version + 1): no exit-status call needed."
    )
    owner_token = carried_owner_field()

    def exit_code_value(self) -> str | None:
        return optional_exit_code(self.validated_data)

    def owner_token_value(self) -> bytes | None:
        return carried_owner_token(self.validated_data)

    def to_domain(self) -> tuple[int, LifecycleTransition]:
        data = self.validated_data
        failure = None
        if data.get("failure") is not None:
            raw = data["failure"]
            identifier("failure.failure_id", K.FAILURE, raw["failure_id"])
            sent = raw.get("detail")
            detail = None if sent is None else FailureDetail(**sent)
            failure = FailureSummary(raw["category"], raw["failure_id"], detail)
        transition = LifecycleTransition(
            data["status"], failure=failure, terminal_rollback=data["terminal_rollback"]
        )
        return data["expected_version"], transition


class ExitStatusInput(Input):
    expected_version = StrictIntegerField()
    exit_code = NameField(NameKind.EXIT_CODE)
    owner_token = carried_owner_field()

    def owner_token_value(self) -> bytes | None:
        return carried_owner_token(self.validated_data)

    def to_domain(self) -> tuple[int, str]:
        data = self.validated_data
        return data["expected_version"], name("exit_code", NameKind.EXIT_CODE, data["exit_code"])


class ClaimInput(Input):
    expected_version = StrictIntegerField()
    owner_token = OwnerTokenField(help_text="16 bytes as 32 lowercase hex characters.")
    worker = worker_field()

    def worker_value(self) -> WorkerIdentity | None:
        return worker_value(self.validated_data)

    def to_domain(self) -> tuple[int, bytes]:
        data = self.validated_data
        with at("owner_token"):
            return data["expected_version"], parse_owner_token(data["owner_token"])


class ControlInput(Input):
    owner_token = OwnerTokenField(help_text="16 bytes as 32 lowercase hex characters.")

    def to_domain(self) -> bytes:
        with at("owner_token"):
            return parse_owner_token(self.validated_data["owner_token"])


class CountsOutput(Output):
    read = serializers.IntegerField()
    processed = serializers.IntegerField()
    written = serializers.IntegerField()
    filtered = serializers.IntegerField()
    committed = serializers.IntegerField()
    rolled_back = serializers.IntegerField()


class StepCountsOutput(CountsOutput):
    """A step's (or a partition's) counts: the six and its skip counts, which
    the server derives from the skip ledger entries its chunk commits carried
    (an aggregated parent's: its partitions' sums)."""

    read_skip = serializers.IntegerField(help_text="Items skipped while reading.")
    process_skip = serializers.IntegerField(help_text="Items skipped while processing.")
    write_skip = serializers.IntegerField(help_text="Items skipped while writing.")


class FailureOutput(Output):
    category = EnumField(FailureCategory)
    failure_id = serializers.IntegerField()
    logs_url = serializers.SerializerMethodField(
        help_text=(
            "Open the logs: OXIDE_BATCH_FAILURE_URL_TEMPLATE filled in with this failure's "
            "id, execution, job, step, host and times (decision 316); null without a template."
        ),
    )

    @extend_schema_field({"type": "string", "nullable": True})
    def get_logs_url(self, failure: Any) -> str | None:
        # Filled in by the execution's or the step's answer, which knows the row.
        return None


class FailureDetailOutput(Output):
    """The failure's detail as kept (scrubbed, bounded). A reader without the
    payload permission (a viewer) is shown `type` alone."""

    type = serializers.CharField(allow_null=True)
    message = serializers.CharField(allow_null=True, required=False)
    traceback = serializers.CharField(
        allow_null=True,
        required=False,
        help_text="Kept with `OXIDE_BATCH_FAILURE_DETAIL=traceback`.",
    )
    type_truncated = serializers.BooleanField(required=False)
    message_truncated = serializers.BooleanField(required=False)
    traceback_truncated = serializers.BooleanField(required=False)


class FailureWithDetailOutput(FailureOutput):
    detail = FailureDetailOutput(
        allow_null=True,
        help_text=(
            "What the runtime said about the failure, as kept (null: nothing kept). "
            "Only in the answers of `GET executions/{id}` and `GET steps/{id}`."
        ),
    )


class DefinitionRefOutput(Output):
    revision = serializers.CharField()
    format = serializers.IntegerField()
    digest = serializers.CharField()


CONTROL_HELP = "The execution's control state; present when the write carried `owner_token`."


# contract §4.2 (the chunk boundary's observation of §9).
class WriteControlOutput(Output):
    """The execution's control state a runtime write answers with: what a
    `control` call would observe at this chunk boundary, without that call."""

    stop_requested = serializers.BooleanField(
        help_text="An operator asked the execution to stop: end the work STOPPED."
    )
    owner_matches = serializers.BooleanField(
        help_text=(
            "The owner token the write carried is the one recorded (false: none is "
            "recorded yet; another one is refused, `execution_owned`)."
        )
    )
    fenced = serializers.BooleanField(
        help_text="A recovery resolved the execution: its worker must stop writing."
    )


# contract §2.5.3.
class LeaseOutput(Output):
    """The owner's lease: while it holds, no recovery may take the execution
    away from its owner unless an operator overrides."""

    ttl_seconds = serializers.IntegerField(
        help_text=(
            "OXIDE_BATCH_LEASE_TTL: the lease expires this long after the owner's latest activity."
        )
    )
    expires_at = InstantField(
        help_text=(
            "`last_activity_at` + TTL. Past it the execution may be recovered at once (the "
            "watchdog does): keep the lease alive by writing or observing `control` well "
            "within the TTL (the Python client's heartbeat observes every TTL/4)."
        )
    )


# contract §4.3 (decision 221): the job-level counters, not the records' counts.
EXECUTION_COUNTS_HELP = (
    "The job-level counters, not the records the job read or wrote: only a job "
    "transition's terminal rollback moves them (`rolled_back`), so they stay 0 "
    "through a whole run. The records' counts are the steps' "
    "(`GET executions/{id}/steps`): sum the steps that are not a partition's worker "
    "(a partitioned step counts its partitions once it has aggregated them) — "
    "what the console's execution page shows as \"records (the steps' totals)\"."
)


# contract §2.5.14.
class LostWriteOutput(Output):
    """A write refused because it expected a version ahead of the stored one: the
    repository lost a write it had acknowledged. Until an operator resolves it,
    a launch or restart of the instance is refused (`lost_write_unresolved`)."""

    expected_version = serializers.IntegerField(help_text="The version the writer expected.")
    stored_version = serializers.IntegerField(help_text="The version the row was at.")
    recorded_at = serializers.CharField(help_text="When it was detected (RFC 3339 UTC).")
    resolved_at = serializers.CharField(
        allow_null=True,
        help_text=(
            "When an operator resolved it (`POST executions/{id}/lost-write/resolve`); "
            "null while it is unresolved."
        ),
    )


# ``last_activity_at``: contract §2.5.3.
class ExecutionOutput(Output):
    """A job execution. `updated_at` is when its version last moved (a
    transition, an exit status, a recovery; not a step's chunk commit, not a
    stop request or a control observation); `last_activity_at` is the activity
    recovery measures inactivity from."""

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
    counts = CountsOutput(source="execution.counts", help_text=EXECUTION_COUNTS_HELP)
    failure = FailureOutput(source="execution.failure", allow_null=True)
    version = serializers.IntegerField(source="execution.version")
    stop_requested = serializers.BooleanField(source="extras.stop_requested")
    stop_requested_at = InstantField(source="extras.stop_requested_at", allow_null=True)
    owner_recorded = serializers.BooleanField(source="extras.owner_recorded")
    last_observed_at = InstantField(source="extras.last_observed_at", allow_null=True)
    last_activity_at = InstantField(
        source="extras.last_activity_at",
        help_text=(
            "The latest runtime write (transition, exit status), owner control "
            "observation or step write (transition, chunk commit) — what the recovery "
            "proposal's `last_activity_at` and inactivity are computed from."
        ),
    )
    definition = DefinitionRefOutput(
        source="extras.definition",
        allow_null=True,
        help_text="null for an attempt bound to the built-in legacy definition",
    )
    lease = LeaseOutput(
        source="extras.lease",
        allow_null=True,
        help_text="The owner's lease while the execution is active and claimed; else null.",
    )
    lost_write = LostWriteOutput(
        source="extras.lost_write",
        allow_null=True,
        help_text="A lost acknowledged write (null: none recorded).",
    )
    worker = WorkerOutput(
        source="extras.worker",
        allow_null=True,
        help_text=(
            "Who runs it (decision 310): what the runtime said of itself with its claim, "
            "and the claimant's username; null when neither is recorded."
        ),
    )
    control = WriteControlOutput(required=False, help_text=CONTROL_HELP)

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)
        if data.get("failure") is not None:
            data["failure"]["logs_url"] = execution_logs(instance)(data["failure"]["failure_id"])
        return data


class ExecutionDetailOutput(ExecutionOutput):
    """A job execution as `GET executions/{id}` answers it: its failure with
    the failure's detail."""

    failure = FailureWithDetailOutput(source="execution.failure", allow_null=True)


class ExecutionWriteOutput(ExecutionOutput):
    """A job execution as the launch answers it: with its control state (the
    other runtime writes carrying `owner_token` add the same `control` member
    to their `Execution` answer)."""

    control = WriteControlOutput()


class ControlOutput(Output):
    execution = ExecutionOutput()
    owner_matches = serializers.BooleanField()
    stop_requested = serializers.BooleanField()


class ExecutionPageOutput(PageOutput):
    results = ExecutionOutput(many=True)
