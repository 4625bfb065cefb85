"""Definitions, their upgrade edges and the capability descriptor."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from oxide_batch.api.errors import at
from oxide_batch.api.fields import DigestField, InstantField, NameField
from oxide_batch.api.serializers.base import Input, Output, name
from oxide_batch.domain.definitions import Manifest, UpgradeEdge
from oxide_batch.domain.names import NameKind


class DefinitionInput(Input):
    job_name = NameField(NameKind.JOB)
    revision = NameField(NameKind.REVISION)
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
    job_name = NameField(NameKind.JOB)
    key = NameField(NameKind.UPGRADE_KEY)
    from_digest = DigestField()
    to_digest = DigestField()
    step_mapping = serializers.DictField(
        child=NameField(NameKind.STEP), help_text="Source step name → target step name."
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
