"""The skip ledger's answers (contract §2.3.3 "Skips")."""

from __future__ import annotations

from rest_framework import serializers

from oxide_batch.api.fields import EnumField, InstantField
from oxide_batch.api.serializers.base import Output, PageOutput
from oxide_batch.domain.skips import SkipPhase
from oxide_batch.domain.status import FailureCategory


class SkipDetailOutput(Output):
    """The skipped item's failure detail as kept (scrubbed, bounded; never a
    traceback). A reader without the payload permission (a viewer) is shown
    `type` alone."""

    type = serializers.CharField(allow_null=True)
    message = serializers.CharField(allow_null=True, required=False)
    type_truncated = serializers.BooleanField(required=False)
    message_truncated = serializers.BooleanField(required=False)


class SkipOutput(Output):
    id = serializers.IntegerField()
    step_execution_id = serializers.IntegerField()
    step_name = serializers.CharField()
    job_execution_id = serializers.IntegerField()
    phase = EnumField(SkipPhase)
    item = serializers.CharField(help_text="The item's key or ordinal, as the runtime sent it.")
    chunk = serializers.IntegerField(
        help_text="The step's committed count after the chunk commit that recorded it."
    )
    category = EnumField(FailureCategory)
    detail = SkipDetailOutput(allow_null=True, help_text="Null: nothing was sent or kept.")
    recorded_at = InstantField()


class SkipPageOutput(PageOutput):
    results = SkipOutput(many=True)
