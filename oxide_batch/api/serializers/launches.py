"""The fused launch (contract §4.2 "Fewer round trips"): the instance's key and the
runtime's owner token in; the instance and its claimed, STARTED attempt out."""

from __future__ import annotations

from oxide_batch.api.fields import DigestField, OwnerTokenField
from oxide_batch.api.serializers.base import Output, at
from oxide_batch.api.serializers.executions import ExecutionWriteOutput
from oxide_batch.api.serializers.instances import InstanceInput, InstanceOutput
from oxide_batch.api.serializers.worker import worker_field, worker_value
from oxide_batch.domain.names import parse_owner_token
from oxide_batch.domain.parameters import JobInstanceKey
from oxide_batch.domain.worker import WorkerIdentity


class LaunchRunInput(InstanceInput):
    owner_token = OwnerTokenField(
        help_text=(
            "16 bytes as 32 lowercase hex characters: the attempt is claimed for this token "
            "(and the request's user), as `claim` does."
        )
    )
    definition_digest = DigestField(
        required=False,
        allow_null=True,
        help_text="Bind the attempt to this definition; default: the latest attempt's.",
    )

    worker = worker_field()

    def launch_values(self) -> tuple[JobInstanceKey, bytes, str | None]:
        key = self.to_domain()
        with at("owner_token"):
            token = parse_owner_token(self.validated_data["owner_token"])
        return key, token, self.validated_data.get("definition_digest")

    def worker_value(self) -> WorkerIdentity | None:
        return worker_value(self.validated_data)


class LaunchOutput(Output):
    instance = InstanceOutput()
    execution = ExecutionWriteOutput()
