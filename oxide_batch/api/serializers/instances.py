"""Job instances: their identifying parameters in, their key and hold out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from oxide_batch.api.fields import EnumField, InstantField, JSONObjectField, NameField
from oxide_batch.api.serializers.base import Input, Output, PageOutput, at, name
from oxide_batch.api.shapes import PARAMETER_MAP
from oxide_batch.conf import batch_settings
from oxide_batch.domain.errors import InvalidParameterValue
from oxide_batch.domain.names import NameKind, validate_new_name
from oxide_batch.domain.parameters import JobInstanceKey, JobParameter, ParameterType
from oxide_batch.selectors.instances import InstanceRecord, shown_key_digest


def parameters(path: str, raw: Mapping[str, Any], *, identifying: bool) -> list[JobParameter]:
    found = []
    with at(path):
        for parameter_name, value in raw.items():
            parameter = JobParameter.from_json(parameter_name, value, identifying=identifying)
            validate_new_name(parameter.name, NameKind.PARAMETER)
            if parameter.type is ParameterType.STRING and "\x00" in str(parameter.value):
                # PostgreSQL cannot store NUL in text or jsonb.
                raise InvalidParameterValue(reason="a string value must not contain NUL")
            found.append(parameter)
    return found


DIGEST_SCHEMA = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

# OpenAPI 3.0 has no ``propertyNames`` (decisions 96 and 165): the keys' rule in words.
PARAMETER_NAMES = (
    "Each name (a key) is 1–128 UTF-8 bytes with no control characters, no invisible "
    "characters (Unicode categories Cf, Zl, Zp) and no leading or "
    "trailing whitespace (a name is compared byte for byte), and is in one of the two maps "
    "only; OpenAPI 3.0 cannot state a rule on keys, so it is stated here in words."
)


@extend_schema_field(PARAMETER_MAP)
class ParameterMapField(JSONObjectField):
    """Parameter name → value (``JobParameter.from_json`` checks each)."""


class InstanceInput(Input):
    job_name = NameField(NameKind.JOB)
    identifying_parameters = ParameterMapField(
        required=False,
        help_text=(
            "name → value: a string, boolean or integer (I64, or U64 above 2^63−1), or "
            '{"type": "string"|"i64"|"u64"|"bool", "value": …}. ' + PARAMETER_NAMES
        ),
    )
    non_identifying_parameters = ParameterMapField(
        required=False,
        help_text=(
            "name → value, as in `identifying_parameters`: accepted and validated, never "
            "stored (no effect on identity). " + PARAMETER_NAMES
        ),
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
    key_digest = serializers.SerializerMethodField(
        help_text=(
            "For readers who may read payloads (runtimes, operators): SHA-256 of the "
            "version-1 key encoding. For other readers (viewers): HMAC-SHA256 of it "
            "under a server secret, so a hidden parameter value cannot be confirmed by "
            "hashing guesses."
        )
    )
    parameters = serializers.SerializerMethodField(
        help_text="Identifying parameters in name byte order; values only where allowed."
    )
    created_at = InstantField(source="instance.created_at")
    hold = HoldOutput(allow_null=True)

    @extend_schema_field(DIGEST_SCHEMA)
    def get_key_digest(self, record: InstanceRecord) -> str:
        # No context (a caller that did not say): the safe answer, the keyed one.
        return shown_key_digest(
            record.instance.key.digest, payload_reader=self.context.get("payloads", False)
        )

    @extend_schema_field(ParameterOutput(many=True))
    def get_parameters(self, record: InstanceRecord) -> list[dict[str, Any]]:
        visible = batch_settings.VISIBLE_PARAMETERS
        shown = []
        for parameter in record.instance.key.parameters:
            item: dict[str, Any] = {"name": parameter.name, "type": parameter.type.value}
            if parameter.name in visible:
                item["value"] = parameter.value
            shown.append(item)
        return shown


class InstancePageOutput(PageOutput):
    results = InstanceOutput(many=True)
