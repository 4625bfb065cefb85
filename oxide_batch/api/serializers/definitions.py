"""Definitions, their upgrade edges and the capability descriptor."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from oxide_batch.api.fields import DigestField, InstantField, NameField
from oxide_batch.api.serializers.base import Input, Output, at, name
from oxide_batch.api.shapes import MANIFEST, NAME_KEYS, name_schema
from oxide_batch.domain.definitions import Manifest, UpgradeEdge
from oxide_batch.domain.names import NameKind


@extend_schema_field(MANIFEST)
class ManifestField(serializers.JSONField):
    """Any JSON value, checked by ``Manifest.canonicalise`` (so a non-object is
    ``invalid_manifest``); documented as the manifests it accepts."""


class DefinitionInput(Input):
    job_name = NameField(NameKind.JOB)
    revision = NameField(NameKind.REVISION)
    manifest = ManifestField(help_text="The server canonicalises it; its digest identifies it.")

    def to_domain(self) -> tuple[str, str, Any]:
        data = self.validated_data
        job_name = name("job_name", NameKind.JOB, data["job_name"])
        revision = name("revision", NameKind.REVISION, data["revision"])
        with at("manifest"):
            Manifest.canonicalise(data["manifest"], job_name=job_name)
        return job_name, revision, data["manifest"]


@extend_schema_field(
    {
        "type": "object",
        "additionalProperties": name_schema(NameKind.STEP),
        "minProperties": 1,
        "description": "Keys are step names "
        + NAME_KEYS.format(bytes=NameKind.STEP.max_bytes)
        + "; no two sources onto one target.",
    }
)
class StepMappingField(serializers.DictField):
    """Source step → target step (``UpgradeEdge.of`` checks it)."""


class UpgradeInput(Input):
    job_name = NameField(NameKind.JOB)
    key = NameField(NameKind.UPGRADE_KEY)
    from_digest = DigestField()
    to_digest = DigestField()
    step_mapping = StepMappingField(
        child=NameField(NameKind.STEP),
        help_text=(
            "Source step name → target step name; no two sources map onto one target. "
            "Each key, like each value, is a step name: 1–128 UTF-8 bytes with no control "
            "characters and no leading or trailing whitespace; OpenAPI 3.0 cannot state a "
            "rule on keys, so it is stated here in words."
        ),
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


class DescriptorOutput(Output):
    # The package's version (its distribution metadata), e.g. "0.2.0".
    version = serializers.CharField()
    descriptor_version = serializers.IntegerField()
    schema_version = serializers.IntegerField()
    capabilities = serializers.ListField(child=serializers.CharField())
    lease_ttl_seconds = serializers.IntegerField(
        help_text=(
            "OXIDE_BATCH_LEASE_TTL: a claimed execution's owner loses its lease this long "
            "after its latest activity; observe `control` well within it (e.g. every TTL/4)."
        )
    )


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
