"""Partition plans of a step: create, restart, assign, complete, aggregate."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import serializers

from oxide_batch.api.fields import (
    EnumField,
    EnvelopeField,
    IdField,
    OwnerTokenField,
    PartitionKeyField,
    StrictIntegerField,
)
from oxide_batch.api.serializers.base import Input, K, Output, at, envelope, identifier
from oxide_batch.api.serializers.executions import (
    CONTROL_HELP,
    CarriesOwnerToken,
    CountsOutput,
    LeaseOutput,
    WriteControlOutput,
)
from oxide_batch.api.serializers.steps import EnvelopeOutput, StepOutput
from oxide_batch.api.serializers.worker import worker_field, worker_value
from oxide_batch.domain.errors import EmptyPartitionPlan, PartitionPlanTooLarge
from oxide_batch.domain.names import parse_owner_token
from oxide_batch.domain.partitions import MAX_PARTITIONS, PartitionPlanEntry
from oxide_batch.domain.state import PARTITION_CONTEXT_LIMITS, EnvelopeKind
from oxide_batch.domain.status import BatchStatus
from oxide_batch.domain.worker import WorkerIdentity


class PartitionEntryInput(Input):
    key = PartitionKeyField(help_text="1–128 UTF-8 bytes, compared byte for byte.")

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["context"] = EnvelopeField(
            required=False, allow_null=True, help_text="{schema, schema_version, payload}, ≤ 4 KiB"
        )
        return fields


class PartitionPlanInput(CarriesOwnerToken):
    # min/max document the plan's size; the checks below raise the domain's own
    # errors first (empty_partition_plan, partition_plan_too_large: contract §4.6).
    entries = PartitionEntryInput(  # type: ignore[call-arg]  # DRF ≥ 3.15; not in the stubs
        many=True,
        min_length=1,
        max_length=MAX_PARTITIONS,
        help_text=(
            f"1–{MAX_PARTITIONS} entries; each key once in the plan "
            "(`duplicate_partition_key`). `uniqueItems` refuses two equal entries; two "
            "entries with the same key and different contexts are refused too — JSON "
            "Schema cannot state uniqueness by one member, so it is stated here in words."
        ),
    )
    # Documented as ``uniqueItems`` (oxide_batch.api.schema.BatchSchema).
    unique_items = frozenset({"entries"})

    def to_internal_value(self, data: Any) -> Any:
        if isinstance(data, Mapping):
            entries = data.get("entries")
            if isinstance(entries, list) and not entries:
                raise EmptyPartitionPlan()
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


class PlanRestartInput(CarriesOwnerToken):
    source_step_execution_id = IdField(
        required=False,
        help_text=(
            "The step whose plan to carry; default: the newest step of the same node "
            "in an earlier attempt of the instance (the step this one took over from)."
        ),
    )

    def to_domain(self) -> int | None:
        source: int | None = self.validated_data.get("source_step_execution_id")
        if source is None:
            return None
        return identifier("source_step_execution_id", K.STEP_EXECUTION, source)


class PartitionCasInput(CarriesOwnerToken):
    expected_version = StrictIntegerField()
    worker_step_execution_id = IdField()

    def to_domain(self) -> tuple[int, int]:
        data = self.validated_data
        worker = identifier(
            "worker_step_execution_id", K.STEP_EXECUTION, data["worker_step_execution_id"]
        )
        return data["expected_version"], worker


class AggregateInput(CarriesOwnerToken):
    expected_version = StrictIntegerField()

    def to_domain(self) -> int:
        version: int = self.validated_data["expected_version"]
        return version


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
    retries = serializers.IntegerField(
        help_text="How many times a claim gave it to a new worker after a failed one "
        "(this attempt)."
    )
    control = WriteControlOutput(required=False, help_text=CONTROL_HELP)

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


class PlanSummaryOutput(Output):
    """What a manager waiting on remote workers reads (issue 43): one GET per interval."""

    by_status = serializers.DictField(
        child=serializers.IntegerField(), help_text="How many partitions have each status."
    )
    claimable = serializers.IntegerField(
        help_text="Partitions a claim may take now: never assigned, or FAILED with retries left."
    )
    running = serializers.IntegerField(help_text="Partitions STARTED (a worker holds each).")
    settled = serializers.BooleanField(
        help_text=(
            "Nothing is claimable or running: every partition is COMPLETED, STOPPED, UNKNOWN, "
            "or FAILED with no retry left — aggregate now."
        )
    )


class PlanOutput(Output):
    step_execution_id = serializers.IntegerField()
    partitions = PartitionOutput(many=True, help_text="In partition key byte order.")
    summary = PlanSummaryOutput(
        required=False, help_text="The plan's counts (the GET's answer only; issue 43)."
    )
    control = WriteControlOutput(required=False, help_text=CONTROL_HELP)


# Issue 43: a remote worker's claim of the next partition (contract §2.4.6).
class PartitionClaimInput(Input):
    owner_token = OwnerTokenField(
        help_text=(
            "The claimant's OWN owner token (16 bytes as 32 lowercase hex characters), "
            "not the execution's: its worker step's writes carry it."
        )
    )
    worker = worker_field()

    def owner_token_value(self) -> bytes:
        with at("owner_token"):
            return parse_owner_token(self.validated_data["owner_token"])

    def worker_value(self) -> WorkerIdentity | None:
        return worker_value(self.validated_data)


class ClaimedPartitionOutput(PartitionOutput):
    """The claimed partition (its context for payload readers)."""


class PartitionClaimOutput(Output):
    claimed = serializers.BooleanField(help_text="Whether a partition was assigned to the caller.")
    partition = ClaimedPartitionOutput(
        required=False, help_text="The claimed partition (claimed: true)."
    )
    worker_step = StepOutput(
        required=False,
        help_text=(
            "The new worker step (claimed: true): STARTED, owned by the claimant's token; "
            "its writes carry that token and renew its lease."
        ),
    )
    checkpoint = EnvelopeOutput(
        required=False,
        allow_null=True,
        help_text="What the worker step took over from the partition's previous worker.",
    )
    lease = LeaseOutput(
        required=False,
        help_text=(
            "The worker step's lease: it expires TTL after its latest write; then the "
            "watchdog fails it and the partition may be claimed again."
        ),
    )
    reason = serializers.ChoiceField(
        choices=["finished", "all_assigned", "stopping"],
        required=False,
        help_text=(
            "Why nothing was claimed (claimed: false): `finished` (nothing left to run: "
            "stop asking), `all_assigned` (the rest is running: ask again after an "
            "interval), `stopping` (a stop was requested: stop asking)."
        ),
    )
    step = StepOutput(required=False, help_text="The parent step (claimed: false).")
    control = WriteControlOutput(
        help_text="The execution's control state, `owner_matches` for the claimant's token."
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["context"] = EnvelopeOutput(
            required=False, allow_null=True, help_text="The same for the step context."
        )
        return fields
