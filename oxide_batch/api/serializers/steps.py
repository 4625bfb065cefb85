"""Step executions: start, chunk commits with their checkpoint and context."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from oxide_batch.api.fields import (
    EnumField,
    EnvelopeField,
    InstantField,
    NameField,
    StrictBooleanField,
    StrictCharField,
    StrictIntegerField,
    document_as,
)
from oxide_batch.api.logs import step_logs
from oxide_batch.api.patterns import name_pattern
from oxide_batch.api.serializers.base import (
    Input,
    Output,
    PageOutput,
    at,
    envelope,
    name,
    state_limits,
)
from oxide_batch.api.serializers.executions import (
    CONTROL_HELP,
    DetailTextField,
    FailureOutput,
    FailureWithDetailOutput,
    StepCountsOutput,
    WriteControlOutput,
    carried_owner_field,
    carried_owner_token,
    detail_text_field,
    optional_exit_code,
    optional_exit_code_field,
)
from oxide_batch.api.serializers.worker import StepWorkerOutput, worker_field, worker_value
from oxide_batch.domain.execution import COUNT_FIELDS, ExecutionCounts
from oxide_batch.domain.failure_detail import MESSAGE_MAX_BYTES, TYPE_MAX_BYTES, FailureDetail
from oxide_batch.domain.flow import MAX_START_LIMIT
from oxide_batch.domain.lifecycle import LifecycleTransition
from oxide_batch.domain.names import NameKind
from oxide_batch.domain.skips import (
    ITEM_MAX_BYTES,
    MAX_SKIPS_PER_COMMIT,
    SkipEntry,
    SkipPhase,
    validate_item,
)
from oxide_batch.domain.state import EnvelopeKind, StateEnvelope
from oxide_batch.domain.status import BatchStatus, FailureCategory
from oxide_batch.domain.worker import WorkerIdentity

STEP_START_STATUSES = (BatchStatus.STARTING, BatchStatus.STARTED)
FINISH_STATUSES = (BatchStatus.COMPLETED,)


def optional_status(statuses: tuple[BatchStatus, ...], help_text: str) -> serializers.ChoiceField:
    """A status a write may ask for, one of ``statuses`` (absent or null: none)."""
    return serializers.ChoiceField(
        choices=[status.value for status in statuses],
        required=False,
        allow_null=True,
        help_text=help_text,
    )


class StepInput(Input):
    step_name = NameField(NameKind.STEP)
    status = optional_status(
        STEP_START_STATUSES,
        "STARTING (the default) or STARTED: created and started at once, in one "
        "write (version 1); the answer then carries what the step took over.",
    )
    owner_token = carried_owner_field()
    node_id = NameField(
        NameKind.NODE, required=False, help_text="Flow node; default: the step name."
    )
    start_limit = StrictIntegerField(required=False, min_value=1, max_value=MAX_START_LIMIT)
    worker = worker_field()
    allow_start_if_complete = StrictBooleanField(
        required=False,
        default=False,
        help_text=(
            "In a restart attempt: run the step again, from nothing, although it COMPLETED in "
            "an earlier attempt (else that is `not_restartable`: a restart skips it). For a "
            "node of a flow plan the manifest node's own attribute decides."
        ),
    )

    def started(self) -> bool:
        return bool(self.validated_data.get("status") == BatchStatus.STARTED.value)

    def owner_token_value(self) -> bytes | None:
        return carried_owner_token(self.validated_data)

    def worker_value(self) -> WorkerIdentity | None:
        return worker_value(self.validated_data)

    def to_domain(self) -> tuple[str, str | None, int | None, bool]:
        data = self.validated_data
        step_name = name("step_name", NameKind.STEP, data["step_name"])
        node_id = data.get("node_id")
        if node_id is not None:
            name("node_id", NameKind.NODE, node_id)
        return step_name, node_id, data.get("start_limit"), data["allow_start_if_complete"]


class CountsInput(Input):
    read = StrictIntegerField(required=False, default=0)
    processed = StrictIntegerField(required=False, default=0)
    written = StrictIntegerField(required=False, default=0)
    filtered = StrictIntegerField(required=False, default=0)
    committed = StrictIntegerField(
        required=False, default=1, help_text="Default 1: a chunk commit is one commit."
    )
    rolled_back = StrictIntegerField(required=False, default=0)


class SkipDetailInput(Input):
    """What the runtime knows of the skipped item's failure. Kept as a failure's
    detail is, type and message only: scrubbed, cut to their bounds; with
    `OXIDE_BATCH_FAILURE_DETAIL=off` the type alone. A `traceback` is accepted
    and never stored."""

    type = detail_text_field(
        TYPE_MAX_BYTES, "The exception's type (its qualified name, e.g. `builtins.ValueError`)."
    )
    message = detail_text_field(MESSAGE_MAX_BYTES, "The exception's message.")
    traceback = DetailTextField(
        required=False, allow_null=True, help_text="Accepted and never stored."
    )


ELIGIBLE = [category.value for category in FailureCategory if category.is_policy_eligible]


class SkipCategoryField(EnumField):
    """Any category is read (so an ineligible one is `skip_not_eligible`, not an
    unknown code); the policy-eligible ones are documented (decision 402).
    Documented in ``__init__``: DRF re-creates a declared field from its
    arguments when it binds it."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault(
            "help_text",
            f"A policy-eligible category ({', '.join(ELIGIBLE)}); any other category "
            "is `skip_not_eligible`.",
        )
        super().__init__(FailureCategory, **kwargs)
        document_as(self, {"type": "string", "enum": ELIGIBLE})


class SkipItemField(StrictCharField):
    """The item: a name's rule at 256 bytes (``validate_item``), documented so."""

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault(
            "help_text",
            f"The skipped item's key or ordinal, as the runtime chooses: 1 to {ITEM_MAX_BYTES} "
            "UTF-8 bytes of visible characters, without surrounding whitespace.",
        )
        super().__init__(**kwargs)
        document_as(
            self,
            {
                "type": "string",
                "minLength": 1,
                "maxLength": ITEM_MAX_BYTES,
                "pattern": name_pattern(ITEM_MAX_BYTES),
            },
        )


class SkipFailureInput(Input):
    category = SkipCategoryField()
    detail = SkipDetailInput(required=False, allow_null=True)


class SkipInput(Input):
    phase = serializers.ChoiceField(choices=[phase.value for phase in SkipPhase])
    item = SkipItemField()
    failure = SkipFailureInput()


class ChunkInput(Input):
    expected_version = StrictIntegerField()
    counts = CountsInput(
        required=False, help_text="This chunk's deltas (each default 0, `committed` 1)."
    )
    finish = optional_status(
        FINISH_STATUSES,
        "COMPLETED: end the step with this chunk, in the same compare-and-swap "
        "(version + 1); refused, nothing is written and the step stays STARTED.",
    )
    exit_code = optional_exit_code_field("The step's exit code, stored by the same write.")
    owner_token = carried_owner_field()
    checkpoint = EnvelopeField(
        required=False, allow_null=True, help_text="{schema, schema_version, payload}"
    )
    skips = SkipInput(  # type: ignore[call-arg] # ListSerializer's max_length (DRF 3.14)
        many=True,
        required=False,
        max_length=MAX_SKIPS_PER_COMMIT,
        help_text=(
            f"The items this chunk skipped (at most {MAX_SKIPS_PER_COMMIT}): each one a row of "
            "the skip ledger, written in the commit's transaction; the step's "
            "`read_skip`/`process_skip`/`write_skip` counts grow by the entries of each phase "
            "(never sent as counts)."
        ),
    )

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        # Declared here: a class attribute named ``context`` would shadow Serializer.context.
        fields["context"] = EnvelopeField(
            required=False, allow_null=True, help_text="{schema, schema_version, payload}"
        )
        return fields

    def to_domain(
        self,
    ) -> tuple[int, ExecutionCounts, StateEnvelope | None, StateEnvelope | None]:
        data = self.validated_data
        raw_counts = data.get("counts") or {"committed": 1}
        counts = ExecutionCounts(**{field: raw_counts.get(field, 0) for field in COUNT_FIELDS})
        limits = state_limits()
        checkpoint = envelope("checkpoint", data.get("checkpoint"), EnvelopeKind.CHECKPOINT, limits)
        context = envelope("context", data.get("context"), EnvelopeKind.CONTEXT, limits)
        return data["expected_version"], counts, checkpoint, context

    def skips_value(self) -> list[SkipEntry]:
        """The skip ledger's entries: an item that is not a name of the ledger's
        rule is `invalid_request` at its path; a category no policy may skip is
        `skip_not_eligible` (decision 402) — before anything is written."""
        entries = []
        for index, raw in enumerate(self.validated_data.get("skips") or ()):
            with at(f"skips.{index}.item"):
                validate_item(raw["item"])
            failure = raw["failure"]
            sent = failure.get("detail")
            detail = None
            if sent is not None:
                detail = FailureDetail(type=sent.get("type"), message=sent.get("message"))
            entries.append(
                SkipEntry(SkipPhase(raw["phase"]), raw["item"], failure["category"], detail, index)
            )
        return entries

    def finish_value(self) -> LifecycleTransition | None:
        finish = self.validated_data.get("finish")
        return None if finish is None else LifecycleTransition(BatchStatus(finish))

    def exit_code_value(self) -> str | None:
        return optional_exit_code(self.validated_data)

    def owner_token_value(self) -> bytes | None:
        return carried_owner_token(self.validated_data)


class EnvelopeOutput(Output):
    schema = serializers.CharField()
    schema_version = serializers.IntegerField()
    payload = serializers.DictField()


class StepOutput(Output):
    """A step execution. Every write to a step (a transition, a chunk commit, the
    recovery that resolves it) moves its version and ``updated_at``;
    ``last_activity_at`` is its last runtime write, which a recovery never moves
    (the one definition every surface shows)."""

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
    counts = StepCountsOutput()
    failure = FailureOutput(allow_null=True)
    version = serializers.IntegerField()
    last_activity_at = InstantField(
        source="activity_at",
        help_text=(
            "The step's last runtime write (transition, chunk commit). A recovery "
            "moves `updated_at`, never this."
        ),
    )
    worker = StepWorkerOutput(
        allow_null=True,
        help_text=(
            "Who created the step (decision 310; a partition worker's step runs elsewhere "
            "than its execution's owner); null when the runtime said nothing. The runtime "
            "user is the execution's (`worker.user` of the execution)."
        ),
    )
    control = WriteControlOutput(required=False, help_text=CONTROL_HELP)

    def to_representation(self, instance: Any) -> Any:
        data = super().to_representation(instance)
        if data.get("failure") is not None:
            data["failure"]["logs_url"] = step_logs(instance)(data["failure"]["failure_id"])
        return data


class StepDetailOutput(StepOutput):
    """A step execution as `GET steps/{id}` answers it: its failure with the
    failure's detail."""

    failure = FailureWithDetailOutput(allow_null=True)


class StepCreatedOutput(StepOutput):
    """A step execution just created. Created ``STARTED`` (``status: STARTED`` in
    the request), it carries the checkpoint and context it took over from the
    earlier attempt's step — that is where a restart's checkpoint arrives — each
    null when it started fresh; created STARTING, neither member is present."""

    checkpoint = EnvelopeOutput(allow_null=True, required=False)

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["context"] = EnvelopeOutput(allow_null=True, required=False)
        return fields


class CheckpointOutput(Output):
    step = StepOutput()
    checkpoint = EnvelopeOutput(allow_null=True)

    def get_fields(self) -> dict[str, serializers.Field[Any, Any, Any, Any]]:
        fields = super().get_fields()
        fields["context"] = EnvelopeOutput(allow_null=True)
        return fields


class StepPageOutput(PageOutput):
    results = StepOutput(many=True)
