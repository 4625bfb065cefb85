"""The capability descriptor, definitions and their upgrade edges."""

from __future__ import annotations

from rest_framework import status as http
from rest_framework.request import Request
from rest_framework.response import Response

import oxide_batch
from oxide_batch.api import serializers as s
from oxide_batch.api.schema import endpoint
from oxide_batch.api.views.base import READ, RUN, BatchView
from oxide_batch.conf import batch_settings
from oxide_batch.roles import RUN_BATCH, VIEW_BATCH


class DescriptorView(BatchView):
    required_permissions = READ

    @endpoint(
        operation_id="descriptor",
        summary="Capability descriptor",
        permission=VIEW_BATCH,
        ok={200: s.DescriptorOutput},
        tags=["repository"],
    )
    def get(self, request: Request) -> Response:
        descriptor = self.repository().descriptor()
        return Response(
            s.DescriptorOutput(
                {
                    "version": oxide_batch.__version__,
                    "descriptor_version": descriptor.descriptor_version,
                    "schema_version": descriptor.schema_version,
                    "capabilities": sorted(c.value for c in descriptor.capabilities),
                    "lease_ttl_seconds": int(batch_settings.LEASE_TTL.total_seconds()),
                }
            ).data
        )


class DefinitionsView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="register_definition",
        summary="Register a definition",
        description="201 when new, 200 when the digest is already registered for the job.",
        permission=RUN_BATCH,
        request=s.DefinitionInput,
        ok={201: s.DefinitionOutput, 200: s.DefinitionOutput},
        errors={
            400: ("unsupported_manifest_version",),
            409: ("definition_drift", "definition_job_mismatch", "concurrent_modification"),
        },
        body=True,
        tags=["definitions"],
    )
    def post(self, request: Request) -> Response:
        job_name, revision, manifest = self.read(s.DefinitionInput, request.data).to_domain()
        self.check_job(job_name)
        with self.unit_of_work() as uow:
            registration = uow.register_definition(job_name, revision, manifest)
            uow.commit()
        definition = registration.definition
        return Response(
            s.DefinitionOutput(definition).data,
            status=http.HTTP_201_CREATED if registration.created else http.HTTP_200_OK,
        )


class UpgradesView(BatchView):
    required_permissions = RUN

    @endpoint(
        operation_id="register_definition_upgrade",
        summary="Register an upgrade edge",
        description="201 when new, 200 when the same edge exists.",
        permission=RUN_BATCH,
        request=s.UpgradeInput,
        ok={201: s.UpgradeOutput, 200: s.UpgradeOutput},
        errors={
            404: ("definition_not_found",),
            409: (
                "definition_upgrade_conflict",
                "definition_job_mismatch",
                "concurrent_modification",
            ),
        },
        body=True,
        tags=["definitions"],
    )
    def post(self, request: Request) -> Response:
        edge = self.read(s.UpgradeInput, request.data).to_domain()
        self.check_job(edge.job_name)
        with self.unit_of_work() as uow:
            created = uow.register_definition_upgrade(edge)
            uow.commit()
        return Response(
            s.UpgradeOutput(
                {
                    "job_name": edge.job_name,
                    "key": edge.key,
                    "from_digest": edge.from_digest,
                    "to_digest": edge.to_digest,
                    "step_mapping": dict(edge.step_mapping),
                }
            ).data,
            status=http.HTTP_201_CREATED if created else http.HTTP_200_OK,
        )
